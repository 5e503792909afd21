"""The embedded engine against the native build on this CPU, measured once before a live run's first lesson.

When both are ready (the native build cached and smoke-tested on this CPU, and the embedded engine installed), each
serves the run's model on a server of this step's own, both up at once, and they answer SAMPLES requests each in
turns (the order alternating): a PREFILL_TOKENS-token prompt, then DECODE_TOKENS tokens decoded. The server's own
timings give each request's prefill and decode in tokens per second; each engine's figure is the median of its
requests, so one request slowed by something else on the machine cannot set the gap (one request each once read
the embedded engine 1.79× faster than the native build on a 2-core machine where the two run the same kernels).
The gap is embedded ÷ native, with the instruction sets each was built with (the native build's from its log's
system info, the embedded wheel's from xllamacpp's). Where only the embedded engine is there, the run
says what it leaves unused on this CPU and how to build the native one. About ten seconds in all; BYTESUP_ENGINE_GAP=0
skips it, and a replay never takes it. The manifest keeps the result as `engine_gap`, the report states it first.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bytesup.errors import BytesupError
from bytesup.host import environment
from bytesup.llama import build
from bytesup.llama import process
from bytesup.llama.client import LlamaServer
from bytesup.llama.responses import decode_tokens_per_s, prefill_tokens_per_s
from bytesup.options import RunOptions
from bytesup.store.manifest import EngineGap
from bytesup.units import PINNED

GAP_ENV = "BYTESUP_ENGINE_GAP"  # "0": the run does not compare the engines
PREFILL_TOKENS = 128
DECODE_TOKENS = 16
SAMPLES = 3  # timed requests on each engine, in turns: a median that one slow request cannot move
FLAGS = ["-c", "512", "--parallel", "1"]
TEXT = "The quick brown fox jumps over the lazy dog while the cat sat on the mat and watched the river run. "
ENABLE = "make native"
# llama.cpp's system info names features that are not instruction sets; the sentence names the instruction sets.
_ISA_NAME = re.compile(r"^(SSE|SSSE|AVX|F16C|FMA|BMI|AMX|NEON|ARM_|SVE|DOTPROD|MATMUL_INT8|SME|FP16|VSX|RISCV|VXE)")


@dataclass(frozen=True)
class Speeds:
    """One engine's prefill and decode in tokens per second, by the server's own timings: one request's, or the
    medians of several (`median_of`)."""

    prefill: float
    decode: float


def median_of(samples: list[Speeds]) -> Speeds:
    return Speeds(prefill=statistics.median(x.prefill for x in samples), decode=statistics.median(x.decode for x in samples))


def skipped_by_env() -> bool:
    return os.environ.get(GAP_ENV, "1").strip().lower() in ("0", "no", "false", "off")


def instruction_sets(system_info: str) -> list[str]:
    """The instruction sets a llama.cpp build was compiled with, from its system info, in a fixed order."""
    return sorted(n for n in build.compiled_features(system_info) if _ISA_NAME.match(n))


# llama.cpp's names for the x86 instruction sets its CPU kernels use, and the flag /proc/cpuinfo gives each.
CPU_FLAG_OF = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
               "BMI2": "bmi2", **build.KERNEL_FLAGS}


def native_instruction_sets(log_line: str, variant: str | None, cpu: build.Cpu) -> list[str]:
    """The native build's instruction sets: from its server log's system info where it shows one, else from its
    variant, built with -march=native: every set of this CPU that llama.cpp names (without AMX for native-no-amx,
    none for portable)."""
    found = instruction_sets(log_line)
    if found or variant not in ("native", "native-no-amx"):
        return found
    return sorted(n for n, flag in CPU_FLAG_OF.items()
                  if flag in cpu.flags and not (variant == "native-no-amx" and n.startswith("AMX")))


def native_ready() -> tuple[Path | None, str]:
    """(the cached native build's bin folder, its one-line description) when it passed its smoke test on this CPU,
    else (None, why not). Nothing is built or tested here."""
    prefix = build.newest_prefix()
    if prefix is None:
        return None, "no native build is cached"
    record = build.read_record(prefix)
    if record is None or not build.has_programs(prefix):
        return None, f"no usable native build in {prefix}"
    tested = build.smoke_on(record, build.this_cpu())
    if not tested or not tested.get("ok"):
        return None, "the cached native build has not passed its smoke test on this CPU"
    return prefix / "bin", f"the native build ({record.get('variant')}, llama.cpp {record.get('llama_cpp_version')})"


def native_variant() -> str | None:
    prefix = build.newest_prefix()
    record = build.read_record(prefix) if prefix is not None else None
    return record.get("variant") if record else None


def ratios(embedded: Speeds, native: Speeds) -> tuple[float, float]:
    """(decode, prefill) of the embedded engine ÷ the native build's."""
    return embedded.decode / native.decode, embedded.prefill / native.prefill


def busy(load: list[float] | None, cores: int | None) -> str | None:
    """A clause on a machine busier than its cores, which makes one request each say little; None otherwise."""
    if not load or not cores or load[0] <= cores:
        return None
    return f"the machine was busy, a load average of {load[0]:.2f} on {cores} cores, so the ratios say little"


def gap_sentence(model: str, embedded: Speeds, native: Speeds, embedded_isa: list[str], native_isa: list[str],
                 unused: list[str], busy_clause: str | None = None) -> str:
    """The gap in words, from the two engines' speeds and instruction sets (and how busy the machine was)."""
    decode, prefill = ratios(embedded, native)
    sets = (f"The native build runs {', '.join(native_isa) or 'no instruction set it names'}; the embedded wheel "
            f"{', '.join(embedded_isa) or 'none it names'}")
    sets += (f", without {', '.join(unused)}, which this CPU has." if unused
             else ", which leaves none of llama.cpp's wider kernels unused on this CPU.")
    return (f"On this CPU the embedded engine decodes at {decode:.2f}× and prefills at {prefill:.2f}× the native "
            f"build's speed ({embedded.decode:.1f} against {native.decode:.1f} tokens/s decoding {DECODE_TOKENS} tokens, "
            f"{embedded.prefill:.0f} against {native.prefill:.0f} tokens/s over a {PREFILL_TOKENS}-token prompt, on "
            f"{model}; the medians of {SAMPLES} requests each, taken in turns, so read a gap of a few percent as noise"
            + (f"; {busy_clause}" if busy_clause else "") + f"). {sets}")


def only_embedded_sentence(why: str, unused: list[str]) -> str:
    """What the embedded engine, the only one ready, leaves unused on this CPU, and how to get the native build."""
    how = (f"`{ENABLE}` (or the first `make test`) builds the native engine once, about 4 to 9 minutes on 2 cores, "
           "and later runs measure with it")
    missing = (f"This CPU has {', '.join(unused)}, which the embedded wheel was built without, so its wider kernels "
               "go unused and decode and prefill may be slower than a native build's" if unused else
               "On this CPU the embedded wheel's kernels use every instruction set llama.cpp's CPU kernels can")
    return f"Only the embedded engine is ready ({why}). {missing}; {how}."


@contextlib.contextmanager
def serving(choice: process.EngineChoice, model: Path, options: RunOptions) -> Iterator[tuple[LlamaServer, list[int], str]]:
    """One engine serving `model` on a port of its own, warmed by a one-token answer: its client, the prompt of
    PREFILL_TOKENS token ids and its server log's system info line ("" where the log has none). Stopped on the way
    out."""
    port = process.free_port()
    try:
        started = process.start_server(model, ["--port", str(port), *FLAGS], die_with_parent=True,
                                       answer_s=options.timeout, engine=choice)
        log = started.log_path.read_text(encoding="utf-8", errors="replace") if started.log_path.is_file() else ""
        info = next((line for line in log.splitlines() if "system_info" in line or "CPU :" in line), "")
        with options.client(started.url, with_key=False) as client:
            client.completion("Hello", n_predict=1, **PINNED)
            ids = client.tokenize(TEXT, with_pieces=False).ids or [0]
            yield client, (ids * (PREFILL_TOKENS // len(ids) + 1))[:PREFILL_TOKENS], info
    finally:
        process.stop_server(port)
        shutil.rmtree(process.state_dir_for(port), ignore_errors=True)


def timed(client: LlamaServer, prompt: list[int]) -> Speeds:
    """One request's prefill and decode by the server's timings; BytesupError where they are not usable."""
    t = client.completion(prompt, n_predict=DECODE_TOKENS, **PINNED).timings
    speeds = Speeds(prefill=prefill_tokens_per_s(t), decode=decode_tokens_per_s(t)) if t is not None else None
    if speeds is None or not all(math.isfinite(v) and v > 0 for v in (speeds.prefill, speeds.decode)):
        raise BytesupError("the server gave no usable timings for the request")
    return speeds


def measure(native_choice: process.EngineChoice, embedded_choice: process.EngineChoice, model: Path,
            options: RunOptions) -> tuple[list[Speeds], list[Speeds], str]:
    """Each engine's SAMPLES requests, in turns with the order alternating (native first, then embedded first, ...),
    and the native build's system info line."""
    natives: list[Speeds] = []
    embeddeds: list[Speeds] = []
    with serving(native_choice, model, options) as (native, native_prompt, info), \
            serving(embedded_choice, model, options) as (embedded, embedded_prompt, _):
        for i in range(SAMPLES):
            turns = [(natives, native, native_prompt), (embeddeds, embedded, embedded_prompt)]
            for samples, client, prompt in (turns if i % 2 == 0 else turns[::-1]):
                samples.append(timed(client, prompt))
    return natives, embeddeds, info


def compare(options: RunOptions, model: Path | None) -> EngineGap:
    """The engines on this CPU (see the module): measured where both are ready, else what the embedded one misses."""
    began = time.monotonic()
    gap = EngineGap()
    try:
        embedded_info = build.embedded_system_info()
        unused = build.unused_features(build.this_cpu(), embedded_info) if embedded_info else []
        gap.unused_by_embedded = unused
        bin_dir, why = native_ready()
        if not embedded_info:
            gap.skipped = "the embedded engine (xllamacpp) is not installed"
        elif bin_dir is None:
            gap.sentence, gap.enable_command = only_embedded_sentence(why, unused), ENABLE
        elif os.environ.get("LLAMA_SERVER"):
            gap.skipped = "LLAMA_SERVER names the server to run, so the run compares no engines of its own"
        elif model is None or not model.is_file():
            gap.skipped = "the served model's file is not readable here"
        else:
            embedded_choice = process.EngineChoice("embedded", [sys.executable, "-m", "bytesup.llama.embedded"],
                                                  "embedded", "the embedded engine, compared with the native build")
            native_choice = process.EngineChoice("llama-server", [str(bin_dir / "llama-server")], "native build", why)
            natives, embeddeds, native_log = measure(native_choice, embedded_choice, model, options)
            native, embedded = median_of(natives), median_of(embeddeds)
            embedded_isa = instruction_sets(embedded_info)
            native_isa = native_instruction_sets(native_log, native_variant(), build.this_cpu())
            gap.model = model.name
            gap.embedded = {"prefill_tokens_per_s": round(embedded.prefill, 2), "decode_tokens_per_s": round(embedded.decode, 2),
                            "instruction_sets": embedded_isa}
            gap.native = {"prefill_tokens_per_s": round(native.prefill, 2), "decode_tokens_per_s": round(native.decode, 2),
                          "instruction_sets": native_isa, "build": why}
            gap.decode_ratio, gap.prefill_ratio = (round(r, 3) for r in ratios(embedded, native))
            gap.load_average = environment.load_average()
            gap.sentence = gap_sentence(model.name, embedded, native, embedded_isa, native_isa, unused,
                                        busy(gap.load_average, os.cpu_count()))
    except (BytesupError, OSError) as exc:  # the comparison is an aside: a failure is said, the run goes on
        gap.skipped = f"the comparison failed: {str(exc)[:300]}"
    gap.seconds = round(time.monotonic() - began, 1)
    return gap
