"""The runner: run folders, no overwrites, a server dying mid-run, resume, replay, schema versions.

The server is played by pytest-httpx with responses recorded from the real engine; the lessons
are two small lessons written into a temporary folder (BYTESUP_LESSONS)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.errors import RunFolderError, SchemaError
from bytesup.store.results import SCHEMA_VERSION, load_result
from bytesup.store.manifest import Manifest
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from conftest import load_fixture

URL = "http://127.0.0.1:8099"

LESSON_TOKENS = '''"""Tokens lesson for tests."""
from bytesup.lesson import LessonContext
TITLE = "Tokens (test)"
def main(ctx: LessonContext):
    tok = ctx.server.tokenize("The capital of France is Paris")
    n = ctx.host("a_host_number", lambda: 1.5)
    ctx.table("ids", "Token ids", [("id", ""), ("piece", "")], [[t.id, t.piece] for t in tok.tokens],
              notes=[f"{len(tok.tokens)} tokens, host value {n}"])
    return ctx.finish()
if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main
    lesson_script_main(__file__)
'''

LESSON_DECODE = '''"""Decode lesson for tests."""
from bytesup.llama.responses import decode_tokens_per_s
TITLE = "Decode (test)"
def main(ctx):
    done = [ctx.server.completion("def fibonacci(n):\\n    if n", n_predict=16, temperature=0, seed=42, cache_prompt=False,
                                  ignore_eos=True) for _ in range(2)]
    ctx.measure("decode_tokens_per_s", "tokens/s", [decode_tokens_per_s(d.timings) for d in done], higher_is_better=True)
    return ctx.finish()
'''


@pytest.fixture
def lessons(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_tokens.py").write_text(LESSON_TOKENS)
    (folder / "02_decode.py").write_text(LESSON_DECODE)
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    return folder


def serve(httpx_mock, *, decode: bool = True) -> None:
    for name, path in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models"), ("tokenize_paris", "/tokenize")]:
        httpx_mock.add_response(url=URL + path, json=load_fixture(name)["response"], is_reusable=True, is_optional=True)
    if decode:
        httpx_mock.add_response(url=URL + "/completion", json=load_fixture("completion_decode")["response"],
                                is_reusable=True, is_optional=True)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_run_writes_a_complete_folder(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["schema_version"] == 1
    assert {k: v["status"] for k, v in manifest["lessons"].items()} == {"01_tokens": "ok", "02_decode": "ok"}
    for key in ("host", "packages", "repository", "engine", "model", "load_average_before", "load_average_after", "command"):
        assert key in manifest
    assert manifest["engine"]["props"]["model_path"].endswith(".gguf")
    result = load_result(json.loads((out / "02_decode.json").read_text()), "02_decode")
    assert len(result.measurement("decode_tokens_per_s").samples) == 2
    exchanges = [json.loads(ln) for ln in (out / "http" / "02_decode.jsonl").read_text().splitlines()]
    assert [e["path"] for e in exchanges] == ["/completion", "/completion"] and exchanges[0]["status"] == 200
    assert "[Tokens (test)](01_tokens.md)" in (out / "README.md").read_text()
    assert "| id | piece |" in (out / "01_tokens.md").read_text()


def test_existing_results_are_never_overwritten(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out))
    before = snapshot(out)
    requests_before = len(httpx_mock.get_requests())
    with pytest.raises(RunFolderError, match="--force"):
        run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out))
    assert snapshot(out) == before
    assert len(httpx_mock.get_requests()) == requests_before  # refused before any request


def test_cli_refusal_exits_non_zero(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    runner = CliRunner()
    first = runner.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)])
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)])
    assert again.exit_code != 0 and "already holds results" in again.output


def test_server_dying_mid_run_keeps_finished_lessons_and_resumes(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("connection refused"), url=URL + "/completion")
    out = tmp_path / "run"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out)) == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"
    assert manifest["lessons"]["01_tokens"]["status"] == "ok"
    assert manifest["lessons"]["02_decode"]["status"] == "failed"
    assert "No llama.cpp server answers" in manifest["lessons"]["02_decode"]["error"]
    assert not (out / "02_decode.json").exists()
    load_result(json.loads((out / "01_tokens.json").read_text()), "01_tokens")  # still valid
    kept = (out / "01_tokens.json").read_bytes()

    # The server is back: --resume runs only what did not finish.
    httpx_mock.add_response(url=URL + "/completion", json=load_fixture("completion_decode")["response"], is_reusable=True)
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, resume=True)) == 0
    assert (out / "01_tokens.json").read_bytes() == kept
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_replay_regenerates_identical_results(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    live = tmp_path / "live"
    run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=live))
    replayed = tmp_path / "replayed"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(replay=live, out=replayed)) == 0
    for name in ("01_tokens.json", "01_tokens.md", "02_decode.json", "02_decode.md", "http/02_decode.jsonl"):
        assert (replayed / name).read_text() == (live / name).read_text(), name


def test_replay_of_an_unrecorded_request_fails_loudly(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    live = tmp_path / "live"
    run_lessons(["02_decode"], RunOptions(server_url=URL, out=live))
    (lessons / "02_decode.py").write_text(LESSON_DECODE.replace("n_predict=16", "n_predict=17"))
    replayed = tmp_path / "replayed"
    assert run_lessons(["02_decode"], RunOptions(replay=live, out=replayed)) == 1
    error = json.loads((replayed / "manifest.json").read_text())["lessons"]["02_decode"]["error"]
    assert "no recorded answer" in error and '"n_predict": 17' in error


def test_newer_schema_is_refused(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    live = tmp_path / "live"
    run_lessons(["01_tokens"], RunOptions(server_url=URL, out=live))
    data = json.loads((live / "01_tokens.json").read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SchemaError, match="newer"):
        load_result(data, "01_tokens.json")


def test_older_schema_is_upgraded_step_by_step(monkeypatch):
    from bytesup.store import results

    data = {"schema_version": 0, "lesson": "01_x", "title": "T", "started_at": "a", "finished_at": "b"}

    def zero_to_one(d):
        d = dict(d)
        d["lesson_id"] = d.pop("lesson")
        d["schema_version"] = 1
        return d

    monkeypatch.setitem(results.UPGRADES, 0, zero_to_one)
    assert load_result(data, "old.json").lesson_id == "01_x"


def test_api_key_never_written(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    secret = "sk-secret-123456789"  # a made-up key: it must reach the server and nothing on disk
    options = RunOptions(server_url=URL, out=out, api_key=secret, command=["bytesup", "run", "--api-key", secret])
    assert run_lessons(["01_tokens"], options) == 0
    assert all(r.headers["Authorization"] == f"Bearer {secret}" for r in httpx_mock.get_requests())
    for path, content in snapshot(out).items():
        assert b"sk-secret" not in content, path


def test_unknown_lesson_lists_valid_ids(lessons):
    res = CliRunner().invoke(app, ["run", "99_nothing"])
    assert res.exit_code == 2
    assert "01_tokens" in res.output and "02_decode" in res.output


def test_server_down_before_start_is_a_clear_error(lessons, tmp_path, httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("refused"))
    res = CliRunner().invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "scripts/start_server.sh" in res.output
    assert not (tmp_path / "run").exists()


def test_not_a_run_folder_for_replay(lessons, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(app, ["run", "01_tokens", "--replay", str(empty), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "not a bytesup run folder" in res.output


LESSON_FACTS = '''"""Server facts lesson for tests."""
TITLE = "Facts (test)"
def main(ctx):
    facts = ctx.server_facts()
    ctx.table("facts", "Facts", [("key", ""), ("value", "")], [[k, str(v)] for k, v in sorted(facts.items())])
    ctx.settings["inherited"] = ctx.inherited_flags()
    return ctx.finish()
'''


def facts_of(out: Path) -> dict:
    result = load_result(json.loads((out / "03_facts.json").read_text()), "03_facts")
    return result.host_values["server_facts"] | {"inherited": result.settings["inherited"]}


def test_server_on_this_host_decodes_from_this_hosts_memory(lessons, tmp_path, httpx_mock):
    (lessons / "03_facts.py").write_text(LESSON_FACTS)
    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["03_facts"], RunOptions(server_url=URL, out=out)) == 0
    facts = facts_of(out)
    assert facts["local"] is True and facts["url_host"] == "127.0.0.1"
    # This machine has no accelerator: decode reads this host's memory.
    assert facts["host_bandwidth_applies"] is True and "CPU" in facts["reason"]
    # A server started outside bytesup: what /props shows is recorded, the rest stays unknown.
    engine_facts = json.loads((out / "manifest.json").read_text())["engine"]
    assert engine_facts["started_by"] == "not bytesup" and engine_facts["flags"]["--ctx-size"] == "2048"
    assert facts["inherited"] == []  # --ctx-size and --parallel are set by each lesson's own servers


def test_remote_server_is_not_bounded_by_this_host(lessons, tmp_path, httpx_mock):
    (lessons / "03_facts.py").write_text(LESSON_FACTS)
    remote = "http://10.20.30.40:8099"
    for name, path in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models")]:
        httpx_mock.add_response(url=remote + path, json=load_fixture(name)["response"], is_reusable=True)
    out = tmp_path / "run"
    assert run_lessons(["03_facts"], RunOptions(server_url=remote, out=out)) == 0
    facts = facts_of(out)
    assert facts["local"] is False and facts["host_bandwidth_applies"] is False
    assert "10.20.30.40" in facts["reason"]


def test_missing_model_file_is_refused_before_any_request(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    res = CliRunner().invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(tmp_path / "gone.gguf"),
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "gone.gguf is not a file here" in res.output
    assert not (tmp_path / "run").exists() and not httpx_mock.get_requests()


def test_resume_with_nothing_left_keeps_the_recorded_facts(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out))
    before = json.loads((out / "manifest.json").read_text())
    requests = len(httpx_mock.get_requests())
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out, resume=True)) == 0
    after = json.loads((out / "manifest.json").read_text())
    assert len(httpx_mock.get_requests()) == requests  # nothing asked of the server
    for key in ("engine", "model", "host", "repository"):
        assert after[key] == before[key], key
    assert after["status"] == "complete"


def test_the_run_bandwidth_is_measured_once_and_shared(monkeypatch):
    from bytesup.host import hostbench
    from bytesup.lesson import RunShared

    calls = []

    def fake(threads, llc=None, samples=hostbench.RUN_SAMPLES):
        calls.append(threads)
        gbs = [30.0, 32.0, 34.0] if len(calls) == 1 else [20.0, 21.0, 22.0]
        return {"threads": threads, "gb_per_s": hostbench.summarize(gbs), "bytes_per_sample": 2**30,
                "bytes_per_thread": 2**29, "method": "fake", "llc_bytes": 2**25}

    monkeypatch.setattr(hostbench, "run_bandwidth", fake)
    manifest, saves = Manifest(), []
    shared = RunShared(manifest, lambda: saves.append(1))
    first = shared.bandwidth_before(2)
    assert shared.bandwidth_before(2) is first and calls == [2]  # every later lesson gets the same reading
    written = manifest.to_json()
    assert written["host_bandwidth"]["before"]["gb_per_s"]["median"] == 32.0 and saves
    after = shared.bandwidth_after()
    assert after["gb_per_s"]["median"] == 21.0 and calls == [2, 2]
    drift = manifest.to_json()["host_bandwidth"]["drift"]
    assert drift["change"] == pytest.approx(21 / 32 - 1) and drift["ranges_overlap"] is False
    # A replay reads the recorded manifest and measures nothing.
    replayed = RunShared(Manifest(), replay_manifest=manifest, replaying=True)
    assert replayed.bandwidth_before(2) == manifest.host_bandwidth.before
    assert replayed.bandwidth_after() == manifest.host_bandwidth.after and calls == [2, 2]
    assert RunShared(Manifest(), replay_manifest=Manifest(), replaying=True).bandwidth_before(2) is None  # an older run


def test_run_bandwidth_plan_reads_four_times_the_cache():
    from bytesup.host import hostbench

    plan = hostbench.run_bandwidth_plan(2, 260 * 2**20)
    assert plan["working_set_bytes"] == 4 * 260 * 2**20 and plan["bytes_per_thread"] == 520 * 2**20
    small = hostbench.run_bandwidth_plan(3, 8 * 2**20)  # never under 256 MiB, whole MiB per thread
    assert small["bytes_per_thread"] == 86 * 2**20 and small["working_set_bytes"] >= 256 * 2**20
    assert hostbench.run_bandwidth_plan(1, None)["working_set_bytes"] == 256 * 2**20


def test_last_level_cache_and_physical_cores_from_sys(tmp_path):
    from bytesup.host import hostbench

    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    llc = hostbench.last_level_cache(str(tmp_path))
    assert llc["bytes"] == 32 * 2**20 and llc["level"] == 3 and llc["source"].endswith("index3/size")
    # Four logical CPUs, two hyper-threads per core: two physical cores, as llama.cpp counts them.
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        t = tmp_path / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True, exist_ok=True)
        (t / "thread_siblings_list").write_text(siblings + "\n")
    assert hostbench.physical_cores(str(tmp_path)) == 2


def test_batch_sizes_and_prefill_weight_reads():
    from bytesup.course import formulas

    assert formulas.batch_sizes({}) == {"n_batch": 2048, "n_ubatch": 512, "source": "llama.cpp's defaults; /props does not report them"}
    assert formulas.batch_sizes({"--ctx-size": "1024"})["n_batch"] == 1024
    got = formulas.batch_sizes({"--batch-size": "256", "--ubatch-size": "512"})
    assert got["n_batch"] == 256 and got["n_ubatch"] == 256 and got["source"] == "server flags"
    assert formulas.prefill_weight_reads(1921, 512) == 4  # the published long prompt: 4 micro-batches
    assert formulas.prefill_weight_reads(512, 512) == 1 and formulas.prefill_weight_reads(513, 512) == 2
    assert formulas.server_threads({"--threads": "3"}, 8) == 3
    # No --threads (or llama.cpp's -1): the physical cores given, as llama.cpp's default.
    assert formulas.server_threads({}, 8) == 8 and formulas.server_threads(None, 2) == 2
    assert formulas.server_threads({"--threads": "-1"}, 4) == 4 and formulas.server_threads({"--threads": "x"}, 4) == 4


# --- where the server runs: the rule on hand-made setups ------------------------------------------

def test_a_local_cpu_server_is_bounded_by_this_hosts_bandwidth():
    from bytesup.llama.placement import ServerSetup, decide

    facts = decide(ServerSetup(url_host="127.0.0.1", local=True, n_gpu_layers=None, accelerators=[], model_readable=True))
    assert (facts.local, facts.on_accelerator, facts.host_bandwidth_applies) == (True, False, True)
    assert facts.reason == "the server decodes on this host's CPU, from this host's memory"
    # A GPU here, but --n-gpu-layers 0 keeps every layer on the CPU: the host's bandwidth still bounds decode.
    cpu_only = decide(ServerSetup(url_host="localhost", local=True, n_gpu_layers="0", accelerators=["CUDA0 (NVIDIA H200)"]))
    assert (cpu_only.on_accelerator, cpu_only.host_bandwidth_applies) == (False, True)


@pytest.mark.parametrize("ngl", ["99", None])  # given, or llama.cpp's default (offload where it can)
def test_a_local_server_offloading_to_a_gpu_is_not_bounded_by_this_hosts_bandwidth(ngl):
    from bytesup.llama.placement import ServerSetup, decide

    facts = decide(ServerSetup(url_host="127.0.0.1", local=True, n_gpu_layers=ngl, accelerators=["CUDA0 (NVIDIA H200)"]))
    assert facts.on_accelerator is True and facts.host_bandwidth_applies is False
    assert facts.reason == (f"the server offloads layers (--n-gpu-layers {ngl or 'default'}) to CUDA0 (NVIDIA H200), "
                            "whose memory feeds decode")


def test_a_remote_server_is_not_bounded_by_this_hosts_bandwidth():
    from bytesup.llama.placement import ServerSetup, decide

    facts = decide(ServerSetup(url_host="gpu-box", local=False, n_gpu_layers="0", accelerators=[]))
    assert (facts.local, facts.on_accelerator, facts.host_bandwidth_applies) == (False, False, False)
    assert facts.reason == "the server runs on gpu-box, not on this host"


def test_loopback_hosts():
    from bytesup.llama.placement import is_loopback

    assert is_loopback("localhost") and is_loopback("127.0.0.1") and is_loopback("127.1.2.3") and is_loopback("::1")
    assert not is_loopback("10.0.0.1") and not is_loopback("gpu-box") and not is_loopback("")


def test_server_facts_are_observed_once_and_recorded_as_before(monkeypatch, tmp_path):
    """The context observes the setup (URL, flags, this host's devices) and records the rule's result
    under `server_facts`, with the keys recorded runs have, in their order."""
    from bytesup.host import environment
    from bytesup.llama.client import LlamaServer
    from bytesup.lesson import LessonContext, Reporter

    monkeypatch.setattr(environment, "accelerators", lambda engine: ["Metal (Apple M2)"] if engine == "llama-server" else [])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    ctx = LessonContext("t", "t", server=LlamaServer("http://127.0.0.1:8099"), run=RunOptions(command=["t"]),
                        model_path=model, sink=[], replay=None, progress=Reporter(None, "t"))
    ctx.identity = {"server": {"engine": "llama-server", "flags": {"--n-gpu-layers": "99"}}}
    facts = ctx.server_facts()
    assert facts == {"url_host": "127.0.0.1", "local": True, "model_readable": True, "accelerators": ["Metal (Apple M2)"],
                     "on_accelerator": True, "host_bandwidth_applies": False,
                     "reason": "the server offloads layers (--n-gpu-layers 99) to Metal (Apple M2), whose memory feeds decode"}
    assert ctx.host_values["server_facts"] == facts
    recorded = json.loads((Path(__file__).parent / "fixtures" / "runs" / "04_next_token" / "04_next_token.json").read_text())
    assert list(facts) == list(recorded["host_values"]["server_facts"])


# --- the run's options are read, never written ---------------------------------------------------------------

LESSON_REPEAT = '''"""Sets its own repetitions."""
TITLE = "Repeat (test)"
def main(ctx):
    ctx.repeat = 7
    ctx.table("r", "Repeat", [("repeat", "")], [[ctx.repeat, ctx.run.repeat]])
    return ctx.finish()
'''


def test_a_run_returns_its_folder_and_leaves_its_options_as_they_were(lessons, tmp_path, httpx_mock):
    import dataclasses

    from bytesup.run.runner import run_into_folder

    serve(httpx_mock)
    (lessons / "03_repeat.py").write_text(LESSON_REPEAT)
    options = RunOptions(server_url=URL, out=tmp_path / "run", repeat=2, command=["t"])
    before = dataclasses.asdict(options)
    end = run_into_folder(["01_tokens", "03_repeat"], options)
    assert end.exit_code == 0 and end.run_dir == (tmp_path / "run").resolve()
    assert dataclasses.asdict(options) == before  # a lesson's own repetitions never reach the shared record
    result = json.loads((end.run_dir / "03_repeat.json").read_text())
    assert result["tables"][0]["rows"] == [[7, 2]] and result["host_values"]["repeat"] == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.repeat = 5  # type: ignore[misc]


def test_lesson_options_are_validated_once_from_the_command_line_to_the_lessons(lessons, tmp_path, httpx_mock, monkeypatch):
    from bytesup.run.lessons import check_lesson_options

    serve(httpx_mock)
    (lessons / "03_opt.py").write_text(LESSON_OPTION)
    calls = []
    real = check_lesson_options
    monkeypatch.setattr("bytesup.run.lessons.check_lesson_options", lambda ids, given: calls.append(ids) or real(ids, given))
    import dataclasses

    from bytesup.cli.app import run_options

    # What the command line gives: every flag of the run (at its default here) and the lesson's option, as text.
    given = {f.name: f.default for f in dataclasses.fields(RunOptions) if "cli" in f.metadata}
    options = run_options({**given, "server_url": URL, "out": tmp_path / "run", "factor": "3"}, ["03_opt"])
    assert options.lesson_options == {"factor": 3.0} and calls == [["03_opt"]]
    assert run_lessons(["03_opt"], options) == 0
    assert calls == [["03_opt"]]
    assert json.loads((tmp_path / "run" / "03_opt.json").read_text())["tables"][0]["rows"] == [[3.0]]
    # Options built by hand (a script, a test) are validated by the runner, once, and a bad one stops it first.
    assert run_lessons(["03_opt"], RunOptions(server_url=URL, out=tmp_path / "two", lesson_options={"factor": "4"})) == 0
    assert calls == [["03_opt"], ["03_opt"]]
    from bytesup.options import OptionError
    with pytest.raises(OptionError, match="--factor"):
        run_lessons(["03_opt"], RunOptions(server_url=URL, out=tmp_path / "three", lesson_options={"factor": "-1"}))
    assert not (tmp_path / "three").exists()


LESSON_OPTION = '''"""Takes one option."""
from pydantic import Field
from bytesup.options import LessonOptions
TITLE = "Option (test)"
class Options(LessonOptions):
    factor: float | None = Field(default=None, gt=0, description="a factor", json_schema_extra={"hint": "a positive number"})
def main(ctx):
    ctx.table("f", "Factor", [("factor", "")], [[ctx.options.factor]])
    return ctx.finish()
'''


# --- a file the server names ----------------------------------------------------------------------------------------

SERVED_MAGIC_ONLY = b"GGUFTOPSECRET: the combination is 1234\n" * 4


def test_a_server_named_file_with_the_magic_but_no_gguf_is_neither_hashed_nor_shown(tmp_path, monkeypatch, capsys):
    from fakes import FakeServer

    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "01_quick.py").write_text('"""Asks nothing."""\nTITLE = "Quick (test)"\n\ndef main(ctx):\n'
                                         '    return ctx.finish()\n')
    monkeypatch.setenv("BYTESUP_LESSONS", str(lessons))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(SERVED_MAGIC_ONLY)
    answers = {p: (200, load_fixture(n)["response"]) for n, p in [("health", "/health"), ("v1_models", "/v1/models")]}
    answers["/props"] = (200, {**load_fixture("props")["response"], "model_path": str(fake)})
    out = tmp_path / "run"
    with FakeServer(answers) as server:
        assert run_lessons(["01_quick"], RunOptions(server_url=server.url, out=out)) == 0
    said = capsys.readouterr().err
    assert "TOPS" not in said and "no GGUF file here; it was not read" in said and "--model" in said
    model = json.loads((out / "manifest.json").read_text())["model"]
    assert "sha256" not in model and "size_bytes" not in model and model["readable_here"] is False
    assert "TOPS" not in (out / "README.md").read_text() and "sha256" not in (out / "README.md").read_text()


def test_only_a_whole_gguf_named_by_the_server_is_used(tmp_path):
    from gguf import GGMLQuantizationType as QT

    from bytesup.run.server import model_path_from
    from test_gguf_read import write_model

    whole = tmp_path / "whole.gguf"
    write_model(whole, QT.F16)
    assert model_path_from({"model_path": str(whole)}, None) == whole
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-100])        # its header parses, its tensor data is not all there
    magic = tmp_path / "magic.gguf"
    magic.write_bytes(SERVED_MAGIC_ONLY)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(whole.read_bytes()[:40])  # the magic, a version and counts, then nothing
    for path in (cut, magic, header_only):
        assert model_path_from({"model_path": str(path)}, None) is None, path.name


def test_the_manifest_keeps_each_lesson_files_sha256_and_a_replay_checks_it(lessons, tmp_path, httpx_mock):
    import hashlib

    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for lid in ("01_tokens", "02_decode"):
        assert manifest["lessons"][lid]["json_sha256"] == hashlib.sha256((out / f"{lid}.json").read_bytes()).hexdigest()
    (out / "02_decode.json").write_text((out / "02_decode.json").read_text().replace('"Decode (test)"', '"Edited"'))
    again = tmp_path / "again"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(replay=out, out=again)) != 0
    replayed = json.loads((again / "manifest.json").read_text())["lessons"]
    assert replayed["01_tokens"]["status"] == "ok" and replayed["02_decode"]["status"] == "failed"
    assert "has changed since the run wrote it" in replayed["02_decode"]["error"]


# --- a stop while the run's own server starts ---------------------------------------------------------------------

@pytest.mark.parametrize("after_s,signame", [(0.05, "SIGINT"), (0.4, "SIGINT"), (1.0, "SIGINT"), (0.4, "SIGTERM")])
def test_ctrl_c_while_the_runs_server_starts_says_so_and_leaves_nothing(tmp_path, lessons, after_s, signame):
    import os
    import signal
    import subprocess
    import sys
    import time

    from gguf import GGMLQuantizationType as QT

    from fakes import fake_engine
    from test_engine_faults import wait_for
    from test_gguf_read import write_model

    model = tmp_path / "small.gguf"
    write_model(model, QT.F16)
    state = Path(os.environ["BYTESUP_STATE"])
    env = {**os.environ, "LLAMA_SERVER": str(fake_engine(tmp_path)), "BYTESUP_MODEL": str(model),
           "FAKE_START_DELAY": "60"}
    out = tmp_path / "run"
    run = subprocess.Popen([sys.executable, "-m", "bytesup", "run", "01_tokens", "--own-server", "--out", str(out)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def written() -> list[str]:
            return [p.read_text() for p in state.glob("server-*/pid") if p.read_text().endswith("\n")]

        wait_for(lambda: bool(written()), timeout=60)
        server_pid = int(written()[0].split()[0])
        time.sleep(after_s)
        run.send_signal(getattr(signal, signame))
        code = run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    said = " ".join(run.stdout.read().split())
    assert code == (130 if signame == "SIGINT" else 143), said
    how = "Ctrl-C" if signame == "SIGINT" else "SIGTERM"
    assert f"Stopped by {how} before the run's first lesson began, while the run's own server was starting" in said
    assert "Traceback" not in said and "KeyboardInterrupt" not in said
    assert not list(state.glob("server-*")) and not out.exists()
    wait_for(lambda: not psutil_alive(server_pid), timeout=15)


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- smaller: a lesson named twice, a replay of some lessons --------------------------------------------------------

def test_a_lesson_named_twice_runs_once_and_says_so(lessons, tmp_path, httpx_mock):
    import io

    from rich.console import Console

    serve(httpx_mock)
    said = io.StringIO()
    out = tmp_path / "run"
    assert run_lessons(["01_tokens", "02_decode", "01_tokens"], RunOptions(server_url=URL, out=out),
                       console=Console(file=said, width=200)) == 0
    assert "01_tokens is named more than once on the command line; it runs once." in said.getvalue()
    assert said.getvalue().count("✓ 01_tokens") == 1
    exchanges = (out / "http" / "01_tokens.jsonl").read_text().splitlines()
    assert [json.loads(e)["path"] for e in exchanges] == ["/tokenize"]
    assert list(json.loads((out / "manifest.json").read_text())["lessons"]) == ["01_tokens", "02_decode"]


def test_run_all_replays_the_lessons_a_folder_holds_and_names_the_others(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    recorded = tmp_path / "recorded"
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL, out=recorded)) == 0
    again = tmp_path / "again"
    res = CliRunner().invoke(app, ["run-all", "--replay", str(recorded), "--out", str(again)])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert f"{recorded} holds no recorded result for 02_decode: that lesson is not replayed; the 1 it holds are." in said
    manifest = json.loads((again / "manifest.json").read_text())
    assert manifest["status"] == "complete" and list(manifest["lessons"]) == ["01_tokens"]
    assert (again / "01_tokens.json").read_text() == (recorded / "01_tokens.json").read_text()


@pytest.mark.parametrize("given,shown", [
    ("http://::1:8404", "`--server http://[::1]:8404`"),
    ("::1:8404", "`--server http://[::1]:8404`"),
    ("127.0.0.1:8099", "`--server http://127.0.0.1:8099`"),
])
def test_a_server_address_that_is_no_url_suggests_one_with_ipv6_in_brackets(lessons, tmp_path, given, shown):
    res = CliRunner().invoke(app, ["run", "01_tokens", "--server", given, "--out", str(tmp_path / "run")])
    said = " ".join(res.output.split())
    assert res.exit_code != 0 and "Traceback" not in said and shown in said, said
    assert not (tmp_path / "run").exists()


def test_the_engine_facts_of_a_server_on_ipv6_are_read_by_its_port(monkeypatch):
    from bytesup.run import server

    asked = []
    monkeypatch.setattr(server.process, "read_engine_info", lambda port: asked.append(port) or {"engine": "x"})
    assert server.engine_facts("http://[::1]:8404", {}, None)["engine"] == "x" and asked == [8404]


def test_a_model_that_cannot_be_built_for_the_runs_server_is_one_paragraph(tmp_path, monkeypatch):
    from rich.console import Console

    from bytesup.errors import BytesupError
    from bytesup.run.server import model_for_run

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path / "a-file" / "models"))
    monkeypatch.setenv("BYTESUP_MODEL", "tiny-q8_0")
    with pytest.raises(BytesupError) as err:
        model_for_run(RunOptions(), Console(file=open(os.devnull, "w")))
    assert "Could not build or fetch the model tiny-q8_0" in str(err.value) and "BYTESUP_MODELS" in str(err.value)
