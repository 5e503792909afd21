"""The native build is kept only once it has run, keyed by the CPU it ran on, and the one engine choice
never takes a build that failed here. Stand-in builds (programs that kill themselves with SIGSEGV, as
ggml's AMX kernels do on some virtualized Xeons) take the compiler's place; the real build's smoke test
is in test_rpc_integration.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import stand_in_build

from bytesup.llama import process
from bytesup.llama import build
from bytesup.llama import rpc
from bytesup.errors import EngineUnavailable, ServerStartError
from bytesup.models.catalog import SYNTHETIC_DEFAULT, ensure_model
from bytesup.llama.build import Cpu, NativeBuildError, parse_cpuinfo

ROOT = Path(__file__).resolve().parents[1]

XEON = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 ssse3 avx avx2 fma f16c avx512f avx512bw avx512_vnni amx_bf16 amx_tile amx_int8 hypervisor

processor\t: 1
model name\t: another
flags\t\t: fpu
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 ssse3 avx avx2 fma f16c avx512f avx512bw avx512_vnni hypervisor
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimdhp asimddp i8mm
"""


# --- the CPU and the cache key --------------------------------------------------------------------------

def test_the_cpu_is_read_from_its_first_processor():
    xeon = parse_cpuinfo(XEON)
    assert xeon.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert "amx_tile" in xeon.flags and "hypervisor" in xeon.flags and len(xeon.flags) == 15
    assert xeon.has_amx and not parse_cpuinfo(EPYC).has_amx
    assert parse_cpuinfo(ARM).flags >= {"asimd", "i8mm"} and not parse_cpuinfo(ARM).has_amx
    assert xeon.isa_flags == ["amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_vnni", "avx512bw", "avx512f",
                              "f16c", "fma", "sse", "sse2", "ssse3"]  # not fpu, not hypervisor


def test_the_key_is_the_same_for_the_same_flags_in_any_order_and_differs_for_one_flag_more():
    a = Cpu("one", frozenset({"avx2", "fma", "sse2"}))
    assert a.key == Cpu("another name", frozenset(["sse2", "fma", "avx2"])).key
    assert a.key != Cpu("one", frozenset({"avx2", "fma", "sse2", "amx_tile"})).key
    assert a.key != Cpu("one", frozenset({"avx2", "fma"})).key
    assert parse_cpuinfo(XEON).key != parse_cpuinfo(EPYC).key
    assert len(a.key) == 16 and int(a.key, 16) >= 0


def test_no_amx_is_tried_only_on_a_cpu_that_reports_amx():
    assert [v.name for v in build.variants_for(parse_cpuinfo(XEON))] == ["native", "native-no-amx", "portable"]
    assert [v.name for v in build.variants_for(parse_cpuinfo(EPYC))] == ["native", "portable"]
    no_amx = " ".join(build.VARIANTS["native-no-amx"].cmake)
    assert "-DGGML_NATIVE=ON" in no_amx and no_amx.count("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16") == 2
    portable = build.VARIANTS["portable"].cmake
    assert "-DGGML_NATIVE=OFF" in portable and "-DGGML_AVX2=OFF" in portable
    flags = build.cmake_flags(build.VARIANTS["native"], "11434.0.0", cuda=True)
    assert "-DGGML_RPC=ON" in flags and "-DLLAMA_BUILD_NUMBER=11434" in flags and flags[-1] == "-DGGML_CUDA=ON"
    assert "-DGGML_CUDA=ON" not in build.cmake_flags(build.VARIANTS["native"], "11434.0.0", cuda=False)


# --- the smoke test -------------------------------------------------------------------------------------

@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def test_the_smoke_test_names_the_signal_of_a_crash(tmp_path, gguf):
    result = build.smoke_test(stand_in_build(tmp_path / "bin", crashes=True), [gguf])
    assert result["ok"] is False and result["detail"] == "llama-bench on m.gguf was killed by SIGSEGV"
    assert result["cpu_key"] == build.this_cpu().key


def test_the_smoke_test_passes_on_a_build_that_prints_its_speeds(tmp_path, gguf):
    result = build.smoke_test(stand_in_build(tmp_path / "bin", crashes=False), [gguf, gguf])
    assert result["ok"] is True and result["detail"] == "m.gguf: 250.0 t/s, 80.0 t/s; m.gguf: 250.0 t/s, 80.0 t/s"


def test_the_smoke_test_is_bounded_in_time_and_reads_bad_output_as_a_failure(tmp_path, gguf):
    folder = tmp_path / "bin"
    folder.mkdir()
    bench = folder / "llama-bench"
    bench.write_text(f"#!{sys.executable}\nimport time; time.sleep(30)\n")
    bench.chmod(0o755)
    result = build.smoke_test(folder, [gguf], timeout_s=0.5)
    assert result["ok"] is False and "did not finish within 0.5 s" in result["detail"]
    bench.write_text(f"#!{sys.executable}\nprint('not json')\n")
    assert build.smoke_test(folder, [gguf])["detail"] == "llama-bench on m.gguf printed no results"
    bench.write_text(f"#!{sys.executable}\nimport sys; print('bad model', file=sys.stderr); sys.exit(3)\n")
    assert build.smoke_test(folder, [gguf])["detail"] == "llama-bench on m.gguf exited with code 3: bad model"


# A stand-in llama-bench that says what it was asked: a row per `-p` length (its tokens/s the length), and the decode at
# 1 tokens/s after --no-warmup, 2 after its own warm-up.
ECHO_BENCH = r'''
import json, sys
a = sys.argv
rows = [{"n_prompt": int(p), "n_gen": 0, "avg_ts": float(p)} for p in a[a.index("-p") + 1].split(",")]
rows.append({"n_prompt": 0, "n_gen": int(a[a.index("-n") + 1]), "avg_ts": 1.0 if "--no-warmup" in a else 2.0})
print(json.dumps(rows))
'''


def test_a_short_prefill_can_stand_for_llama_benchs_own_warm_up(tmp_path, gguf):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "llama-bench").write_text(f"#!{sys.executable}\n{ECHO_BENCH}")
    (folder / "llama-bench").chmod(0o755)
    # Its own warm-up (a whole run of each test first), or none.
    assert build.bench(folder, gguf, 1921, 32, 2) == {"prefill_tokens_per_s": [1921.0], "decode_tokens_per_s": [2.0]}
    assert build.bench(folder, gguf, 1921, 32, 2, warmup=False)["decode_tokens_per_s"] == [1.0]
    # A 32-token prefill first instead, not kept, and no warm-up of llama-bench's own.
    assert build.bench(folder, gguf, 1921, 32, 2, warmup_prompt=32) == {"prefill_tokens_per_s": [1921.0],
                                                                        "decode_tokens_per_s": [1.0]}
    # A prompt no longer than the warm-up's: llama-bench's own warm-up, which costs no more.
    assert build.bench(folder, gguf, 16, 32, 2, warmup_prompt=32) == {"prefill_tokens_per_s": [16.0],
                                                                      "decode_tokens_per_s": [2.0]}


# --- building: the fallback ------------------------------------------------------------------------------

def stand_in_compiler(tmp_path: Path, crashing: set[str], log: list[str]):
    """A compile step that makes a stand-in build per variant; those in `crashing` crash with SIGSEGV."""

    def compile_variant(variant, build_log: Path) -> Path:
        log.append(variant.name)
        return stand_in_build(tmp_path / "work" / variant.name, crashes=variant.name in crashing)

    return compile_variant


def run_build(tmp_path, gguf, cpu: Cpu, crashing: set[str]) -> tuple[dict, list[str], list[str]]:
    compiled: list[str] = []
    said: list[str] = []
    record = build.build(tmp_path / "cache" / "llama.cpp-1.0.0", tmp_path / "work",
                         stand_in_compiler(tmp_path, crashing, compiled), cpu=cpu,
                         smoke=lambda out: build.smoke_test(out, [gguf]), say=said.append)
    return record, compiled, said


def test_a_crashing_native_build_on_an_amx_cpu_is_rebuilt_without_amx(tmp_path, gguf):
    cpu = parse_cpuinfo(XEON)
    record, compiled, said = run_build(tmp_path, gguf, cpu, crashing={"native"})
    assert compiled == ["native", "native-no-amx"]
    assert record["variant"] == "native-no-amx" and record["cmake_flags"] == list(build.VARIANTS["native-no-amx"].cmake)
    assert record["kept_because"] == "native-no-amx: native failed its smoke test (llama-bench on m.gguf was killed by SIGSEGV)"
    assert said[-1] == f"kept {record['kept_because']}"  # one line says which variant was kept and why
    assert record["built_on"]["cpu_key"] == cpu.key and record["built_on"]["amx"] is True
    assert record["smoke"][cpu.key]["ok"] is True and [t["variant"] for t in record["tried"]] == ["native", "native-no-amx"]
    prefix = tmp_path / "cache" / "llama.cpp-1.0.0"
    assert json.loads((prefix / "build.json").read_text()) == record and record["llama_cpp_version"] == "1.0.0"
    assert build.has_programs(prefix)


def test_when_no_amx_crashes_too_the_build_is_portable(tmp_path, gguf):
    record, compiled, _ = run_build(tmp_path, gguf, parse_cpuinfo(XEON), crashing={"native", "native-no-amx"})
    assert compiled == ["native", "native-no-amx", "portable"] and record["variant"] == "portable"
    assert record["kept_because"].count("failed its smoke test") == 2


def test_a_cpu_without_amx_keeps_the_native_build_or_goes_portable(tmp_path, gguf):
    record, compiled, said = run_build(tmp_path, gguf, parse_cpuinfo(EPYC), crashing=set())
    assert compiled == ["native"] and record["variant"] == "native"
    assert said[-1] == "kept native: its smoke test passed"
    record, compiled, _ = run_build(tmp_path, gguf, parse_cpuinfo(EPYC), crashing={"native"})
    assert compiled == ["native", "portable"] and record["variant"] == "portable"


def test_when_every_variant_crashes_the_build_says_what_to_do_and_keeps_nothing(tmp_path, gguf):
    with pytest.raises(NativeBuildError) as err:
        run_build(tmp_path, gguf, parse_cpuinfo(EPYC), crashing={"native", "portable"})
    text = str(err.value)
    assert "native: llama-bench on m.gguf was killed by SIGSEGV; portable: llama-bench" in text
    assert "BYTESUP_ENGINE=embedded" in text and "LLAMA_SERVER" in text
    assert not (tmp_path / "cache" / "llama.cpp-1.0.0").exists()


def test_a_variant_that_does_not_compile_is_passed_over(tmp_path, gguf):
    def compile_variant(variant, log):
        if variant.name == "native":
            raise NativeBuildError("lots of compiler output\nThe llama.cpp build step `cmake …` failed (code 2)")
        return stand_in_build(tmp_path / "work" / variant.name, crashes=False)

    record = build.build(tmp_path / "cache" / "llama.cpp-1.0.0", tmp_path / "work", compile_variant,
                         cpu=parse_cpuinfo(EPYC), smoke=lambda out: build.smoke_test(out, [gguf]), say=lambda _: None)
    assert record["variant"] == "portable"
    assert record["tried"][0]["smoke"]["detail"] == "the build failed: The llama.cpp build step `cmake …` failed (code 2)"


# --- the cache: used as it is on the CPU it passed on, tested again elsewhere, set aside when it fails ----

def cached(tmp_path, cpu: Cpu, crashes: bool, tested_ok: bool = True, version: str = "1.0.0") -> Path:
    """A cached stand-in build whose record says it passed (or failed) its smoke test on `cpu`."""
    prefix = tmp_path / "cache" / f"llama.cpp-{version}"
    stand_in_build(prefix / "bin", crashes=crashes)
    build.write_record(prefix, {"llama_cpp_version": version, "variant": "native", "built_on": cpu.facts(),
                                "smoke": {cpu.key: {"ok": tested_ok, "detail": "recorded"}}})
    return prefix


def never(_out):
    raise AssertionError("no smoke test was expected")


def test_a_build_that_passed_on_this_cpu_is_used_without_a_new_test(tmp_path):
    cpu = parse_cpuinfo(EPYC)
    prefix = cached(tmp_path, cpu, crashes=True)  # crashing programs: a test now would fail
    record, why = build.checked_build(prefix, cpu, smoke=never)
    assert record is not None and why == "the cached native build (native, llama.cpp 1.0.0)"


def test_a_build_from_another_cpu_is_tested_again_and_kept_when_it_runs(tmp_path, gguf):
    prefix = cached(tmp_path, parse_cpuinfo(XEON), crashes=False)
    here = parse_cpuinfo(EPYC)
    record, _ = build.checked_build(prefix, here, smoke=lambda out: build.smoke_test(out, [gguf]))
    assert record is not None and record["smoke"][here.key]["ok"] is True
    again, _ = build.checked_build(prefix, here, smoke=never)  # recorded: not tested a third time
    assert again is not None and set(again["smoke"]) == {here.key, parse_cpuinfo(XEON).key}


def test_a_build_that_crashes_on_this_cpu_is_set_aside_and_never_chosen(tmp_path, gguf):
    prefix = cached(tmp_path, parse_cpuinfo(EPYC), crashes=True)
    here = parse_cpuinfo(XEON)
    record, why = build.checked_build(prefix, here, smoke=lambda out: build.smoke_test(out, [gguf]))
    assert record is None and not prefix.exists()
    aside = tmp_path / "cache" / f"llama.cpp-1.0.0.set-aside-{here.key}"
    assert aside.is_dir() and f"set aside in {aside}" in why and "killed by SIGSEGV" in why
    assert json.loads((aside / "build.json").read_text())["smoke"][here.key]["ok"] is False
    assert build.newest_prefix(tmp_path / "cache") is None  # the set-aside folder is never a candidate


def test_the_newest_version_is_chosen_and_a_build_from_before_records_is_not(tmp_path, monkeypatch, gguf):
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "cache"))
    assert rpc.native_bin_dir() is None
    here = build.this_cpu()
    for ver in ("9.0.0", "11434.0.0"):
        cached(tmp_path, here, crashes=False, version=ver)
    (tmp_path / "cache" / "llama.cpp-20000.0.0").mkdir()  # unfinished: no programs, no record
    assert build.newest_prefix(tmp_path / "cache").name == "llama.cpp-20000.0.0"
    assert build.usable_build()[0] is None
    (tmp_path / "cache" / "llama.cpp-20000.0.0").rmdir()
    assert rpc.native_bin_dir() == tmp_path / "cache" / "llama.cpp-11434.0.0" / "bin"
    legacy = tmp_path / "cache" / "llama.cpp-11434.0.0"
    (legacy / "build.json").unlink()
    (legacy / "BUILT").write_text("version 11434.0.0\n")  # as the build script left it before build.json
    record, bin_dir, why = build.usable_build()
    assert record is None and bin_dir is None and "from before builds were smoke-tested and recorded" in why
    (legacy / "BUILT").unlink()
    cached(tmp_path, here, crashes=False, version="11434.0.0")
    monkeypatch.delenv("RPC_SERVER", raising=False)
    assert rpc.rpc_server_program() == tmp_path / "cache" / "llama.cpp-11434.0.0" / "bin" / "rpc-server"


def test_print_names_only_a_build_that_runs_here(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BYTESUP_LLAMA_CPP_VERSION", "1.0.0")
    assert build.main(["--print"]) == 1 and "no native build" in capsys.readouterr().err
    cached(tmp_path, build.this_cpu(), crashes=False)
    assert build.main(["--print"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cache" / "llama.cpp-1.0.0" / "bin")
    assert build.main(["--bogus"]) == 2


# --- the one engine choice ------------------------------------------------------------------------------

@pytest.fixture
def no_engines(tmp_path, monkeypatch):
    """No LLAMA_SERVER, no llama-server on PATH, an empty cache, no BYTESUP_ENGINE."""
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("BYTESUP_LLAMA_CPP_VERSION", "1.0.0")
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.delenv("BYTESUP_ENGINE", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")


def test_the_choice_prefers_llama_server_then_the_native_build_then_path_then_embedded(tmp_path, monkeypatch, no_engines):
    chosen = process.choose_engine()
    assert (chosen.kind, chosen.source) == ("embedded", "embedded") and "no native build is cached" in chosen.why
    on_path = stand_in_build(tmp_path / "path", crashes=False)
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    assert process.choose_engine().source == "PATH"
    prefix = cached(tmp_path, build.this_cpu(), crashes=False)
    chosen = process.choose_engine()
    assert (chosen.source, chosen.command) == ("native build", [str(prefix / "bin" / "llama-server")])
    assert chosen.facts()["native_build"]["variant"] == "native"
    assert chosen.facts()["native_build"]["smoke_here"] == {"ok": True, "detail": "recorded"}
    monkeypatch.setenv("LLAMA_SERVER", str(on_path / "llama-server"))
    assert process.choose_engine().source == "LLAMA_SERVER"
    monkeypatch.delenv("LLAMA_SERVER")
    monkeypatch.setenv("BYTESUP_ENGINE", "embedded")
    assert process.choose_engine().source == "embedded"
    assert process.choose_engine(native=True).source == "native build"  # RPC: only a binary will do


def test_a_build_that_failed_here_is_never_chosen_and_the_choice_says_why(tmp_path, no_engines):
    cached(tmp_path, build.this_cpu(), crashes=True, tested_ok=False)
    chosen = process.choose_engine()
    assert chosen.source == "embedded" and "failed its smoke test on this CPU (recorded)" in chosen.why
    with pytest.raises(EngineUnavailable) as err:
        process.choose_engine(native=True)
    assert "scripts/build_llama_server.sh" in str(err.value) and err.value.exit_code == 3


def test_a_llama_server_that_crashes_before_it_is_ready_gets_the_hint(tmp_path, monkeypatch, no_engines):
    crashing = stand_in_build(tmp_path / "user", crashes=True)
    monkeypatch.setenv("LLAMA_SERVER", str(crashing / "llama-server"))
    model = ensure_model(SYNTHETIC_DEFAULT)
    with pytest.raises(ServerStartError) as err:
        process.start_server(model, ["--port", str(process.free_port())])
    text = str(err.value)
    assert "exited with code -11 (killed by SIGSEGV) before it was ready" in text
    assert process.REBUILD_HINT in text and "BYTESUP_ENGINE=embedded" in text


def test_start_server_script_skips_a_crashing_native_build_and_says_why(tmp_path, no_engines):
    """A cached build that ran on another CPU, whose programs crash here: start_server.sh tests it, sets it
    aside and serves on the embedded engine, saying why in one line; engine.json records the choice."""
    prefix = cached(tmp_path, parse_cpuinfo(XEON), crashes=True)
    model = ensure_model(SYNTHETIC_DEFAULT)
    port = str(process.free_port())
    env = {**os.environ, "BYTESUP_PYTHON": sys.executable}
    res = subprocess.run(["bash", str(ROOT / "scripts" / "start_server.sh"), str(model), "--port", port],
                         capture_output=True, text=True, env=env, timeout=300)
    try:
        assert res.returncode == 0, res.stderr
        line = next(x for x in res.stdout.splitlines() if x.startswith("engine: "))
        assert line.startswith("engine: the embedded engine: the cached native build (native) failed its smoke test")
        assert "killed by SIGSEGV" in line and "set aside" in line
        info = json.loads((process.state_dir_for(int(port)) / "engine.json").read_text())
        assert info["engine"] == "embedded" and info["choice"]["source"] == "embedded"
        assert not prefix.exists() and list((tmp_path / "cache").glob("llama.cpp-1.0.0.set-aside-*"))
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "stop_server.sh"), "--port", port], env=env, timeout=60)


# --- make run's choice: the fastest engine that is ready --------------------------------------------------

WHEEL_AVX2 = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "


def test_the_features_a_build_leaves_unused_are_the_cpus_wider_kernels_missing_from_its_system_info():
    assert build.compiled_features(WHEEL_AVX2) == {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE"}
    zen4 = build.Cpu("EPYC", frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_vbmi"}))
    assert build.unused_features(zen4, WHEEL_AVX2) == ["AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"]
    assert build.unused_features(zen4, WHEEL_AVX2 + "AVX512 = 1 | AVX512_VNNI = 1 | AVX512_VBMI = 0 |") == [
        "AVX512_VBMI", "AVX512_BF16"]
    avx2_only = build.Cpu("EPYC", frozenset({"avx", "avx2", "fma"}))
    assert build.unused_features(avx2_only, WHEEL_AVX2) == []
    sapphire = build.Cpu("Xeon", frozenset({"avx512f", "amx_int8", "avx_vnni"}))
    assert build.unused_features(sapphire, WHEEL_AVX2) == ["AVX512", "AVX_VNNI", "AMX_INT8"]


def test_make_runs_choice_takes_the_native_build_when_ready_and_never_path(tmp_path, monkeypatch, no_engines):
    monkeypatch.setenv("BYTESUP_ENGINE", "fastest")
    monkeypatch.setattr(build, "embedded_system_info", lambda: WHEEL_AVX2)
    monkeypatch.setattr(build, "this_cpu", lambda: build.Cpu("EPYC", frozenset({"avx2", "avx512f"})))
    on_path = stand_in_build(tmp_path / "path", crashes=False)
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    chosen = process.choose_engine()
    assert (chosen.kind, chosen.source) == ("embedded", "embedded")  # a llama-server on PATH is passed over
    assert "no native build is cached" in chosen.why and "This CPU has AVX512" in chosen.why and "`make native`" in chosen.why
    monkeypatch.setattr(build, "this_cpu", lambda: build.Cpu("EPYC", frozenset({"avx2"})))
    assert "kernels use every instruction set" in process.choose_engine().why
    prefix = cached(tmp_path, build.this_cpu(), crashes=False)
    chosen = process.choose_engine()
    assert (chosen.source, chosen.command) == ("native build", [str(prefix / "bin" / "llama-server")])


def test_make_run_asks_for_the_fastest_engine_and_make_native_builds_it():
    root = Path(__file__).resolve().parents[1]
    assert 'BYTESUP_ENGINE="${BYTESUP_ENGINE:-fastest}"' in (root / "scripts" / "run_course.sh").read_text()
    makefile = (root / "Makefile").read_text()
    assert "\nnative: install\n\tbash scripts/build_llama_server.sh\n" in makefile
