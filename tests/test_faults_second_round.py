"""The second round of faults (issue 23), one section per class. Each test fails on the code before the fix.
Bad server behaviour comes from tests/fakes.py's FakeServer, a stand-in llama-server, or hand-made files."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from gguf import GGMLQuantizationType as QT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bytesup.llama import process as engine
from bytesup.models import gguf as gguf_read
from bytesup.run import folder as runfolder
from bytesup.cli.app import app
from bytesup.errors import BytesupError, RunFolderError, SchemaError, redact_url
from bytesup.models.gguf import GGUFError
from bytesup.options import RunOptions, redact_command
from bytesup.run.runner import run_lessons
from bytesup.store.runs import load_replay, read_manifest

from conftest import load_fixture
from fakes import FakeServer, fake_engine
from test_engine_faults import wait_for
from test_gguf_read import write_model

ROOT = Path(__file__).resolve().parents[1]
SERVER = {p: (200, load_fixture(n)["response"]) for n, p in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models")]}

LESSON_SLEEPS = '''"""Marks that it runs, then waits: a lesson to interrupt."""
import os, time
from pathlib import Path
TITLE = "Sleeps (test)"
def main(ctx):
    Path(os.environ["MARK"]).write_text("running")
    time.sleep(60)
    return ctx.finish()
'''

LESSON_QUICK = '''"""Asks the server nothing and finishes; with FLIP set, the server serves another model afterwards."""
import os
from pathlib import Path
TITLE = "Quick (test)"
def main(ctx):
    if os.environ.get("FLIP"):
        Path(os.environ["FLIP"]).write_text("swapped")
    return ctx.finish()
'''


def words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def lessons_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_sleeps.py").write_text(LESSON_SLEEPS)
    (folder / "02_quick.py").write_text(LESSON_QUICK)
    (folder / "03_quick.py").write_text(LESSON_QUICK)
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    return folder


# --- 1. signals and resume ---------------------------------------------------------------------------

def start_run(tmp_path, lessons_dir, url: str, *extra: str, parent: bool = False, env: dict | None = None):
    mark = tmp_path / "mark"
    env = {**os.environ, "MARK": str(mark), **(env or {})}
    argv = [sys.executable, "-m", "bytesup", "run", "01_sleeps", "--server", url, "--out", str(tmp_path / "run"), *extra]
    if parent:  # a shell in between, as make is: the run's parent, killed in the test
        argv = ["bash", "-c", " ".join(f"'{a}'" for a in argv) + "; sleep 60"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for(mark.exists)
    return proc


@pytest.mark.parametrize("count", [3, 5])
def test_ctrl_c_pressed_again_and_again_never_undoes_the_cleanup(tmp_path, lessons_dir, count):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        try:
            for _ in range(count):
                run.send_signal(signal.SIGINT)
                time.sleep(0.001)
            code = run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
    output = run.stdout.read()
    assert code == 130, output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and manifest["lessons"]["01_sleeps"]["status"] == "interrupted"
    assert "continues it" in output and "--resume" in output and "Traceback" not in output


def test_sigterm_then_ctrl_c_still_saves_the_manifest(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        run.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # two signals pending at once are handled in signal-number order, SIGINT first
        run.send_signal(signal.SIGINT)
        code = run.wait(timeout=30)
    assert code == 143
    entry = json.loads((tmp_path / "run" / "manifest.json").read_text())["lessons"]["01_sleeps"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"]


def test_a_run_told_to_die_with_its_parent_stops_cleanly_when_the_parent_is_killed(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        shell = start_run(tmp_path, lessons_dir, server.url, parent=True, env={"BYTESUP_DIE_WITH_PARENT": "1"})
        run_pid = next(p.pid for p in psutil.Process(shell.pid).children() if "bytesup" in " ".join(p.cmdline()))
        shell.kill()  # kill -9 of the parent, as of make
        shell.wait()
        wait_for(lambda: not alive(run_pid))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    entry = manifest["lessons"]["01_sleeps"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"] and manifest["status"] == "incomplete"


def test_the_own_server_of_a_run_dies_with_it_even_on_kill_9(tmp_path, lessons_dir, monkeypatch):
    """--own-server (make run): the run's server is started for it and dies when the run is killed outright."""
    model = tmp_path / "small.gguf"
    write_model(model, QT.F16)
    env = {"LLAMA_SERVER": str(fake_engine(tmp_path)), "BYTESUP_MODEL": str(model)}
    mark = tmp_path / "mark"
    run = subprocess.Popen([sys.executable, "-m", "bytesup", "run", "01_sleeps", "--own-server", "--out", str(tmp_path / "run")],
                           env={**os.environ, "MARK": str(mark), **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(mark.exists)
        state = Path(os.environ["BYTESUP_STATE"])
        server_pid = int(next(state.glob("server-*/pid")).read_text().split()[0])
        assert alive(server_pid)
        run.kill()
        run.wait(timeout=30)
        wait_for(lambda: not alive(server_pid), timeout=15)  # PDEATHSIG
    finally:
        if run.poll() is None:
            run.kill()
    assert "The run has its own server" in run.stdout.read()


def test_own_server_and_server_exclude_each_other(tmp_path, lessons_dir):
    with pytest.raises(BytesupError, match="cannot be combined with --server"):
        run_lessons(["02_quick"], RunOptions(server_url="http://127.0.0.1:9", own_server=True, out=tmp_path / "run"))


def test_the_resume_command_of_a_make_run_is_a_make_run(monkeypatch, tmp_path):
    command = ["bytesup", "run-all", "--own-server", "--report", "--repeat", "5", "--out", "old", "--force"]
    monkeypatch.delenv(runfolder.MAKE_RUN_ENV, raising=False)
    assert runfolder.resume_command(command, tmp_path / "r") == (
        f"bytesup run-all --own-server --report --repeat 5 --out {tmp_path / 'r'} --resume")
    monkeypatch.setenv(runfolder.MAKE_RUN_ENV, "make run MODEL=tiny-q8_0")
    assert runfolder.resume_command(command, tmp_path / "r") == (
        f"make run MODEL=tiny-q8_0 ARGS='--repeat 5 --out {tmp_path / 'r'} --resume'")


def test_run_course_starts_the_run_with_its_own_server_and_a_make_resume():
    script = (ROOT / "scripts" / "run_course.sh").read_text()
    assert "exec \"$py\" -m bytesup run-all --own-server --report" in script
    assert "BYTESUP_DIE_WITH_PARENT=1" in script and "BYTESUP_MAKE_RUN=" in script
    assert "start_server.sh" not in script  # no server outside the run, for make's trap to stop too early


# --- 2. the server changes under a run ---------------------------------------------------------------

def swapping_server(flag: Path) -> FakeServer:
    """The default model's /props and /v1/models until `flag` exists, then tiny-q8_0's path and size."""
    props = load_fixture("props")["response"]
    models = load_fixture("v1_models")["response"]

    def now_props(_body):
        if flag.exists():
            return 200, {**props, "model_path": "/elsewhere/tiny-q8_0.gguf"}
        return 200, props

    def now_models(_body):
        if flag.exists():
            data = [{**models["data"][0], "meta": {**models["data"][0].get("meta", {}), "size": 123}}]
            return 200, {**models, "data": data}
        return 200, models

    return FakeServer({"/health": (200, {"status": "ok"}), "/props": now_props, "/v1/models": now_models})


def test_a_model_swapped_between_lessons_stops_the_run_naming_both(tmp_path, lessons_dir, monkeypatch):
    flag = tmp_path / "flag"
    monkeypatch.setenv("FLIP", str(flag))
    out = tmp_path / "run"
    with swapping_server(flag) as server:
        code = run_lessons(["02_quick", "03_quick"], RunOptions(server_url=server.url, out=out))
    assert code == 1
    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["lessons"]
    # 02 swapped the server while it ran: its own result is not saved either, and 03 never starts.
    assert entries["02_quick"]["status"] == "failed" and entries["03_quick"]["status"] == "pending"
    error = entries["02_quick"]["error"]
    assert "changed during the run" in error and "/elsewhere/tiny-q8_0.gguf" in error and "model tensor bytes" in error
    assert not (out / "02_quick.json").exists() and manifest["status"] == "incomplete"


def test_a_server_that_stays_the_same_passes_the_check(tmp_path, lessons_dir):
    out = tmp_path / "run"
    with swapping_server(tmp_path / "never") as server:
        assert run_lessons(["02_quick", "03_quick"], RunOptions(server_url=server.url, out=out)) == 0


# --- 5. secrets and the local file system ------------------------------------------------------------

def test_credentials_in_a_url_never_reach_outputs_or_messages(tmp_path, lessons_dir, capsys):
    out = tmp_path / "run"
    with FakeServer(SERVER) as server:
        url = server.url.replace("http://", "http://alice:hunter2pw@")
        command = ["bytesup", "run", "02_quick", "--server", url]
        assert run_lessons(["02_quick"], RunOptions(server_url=url, out=out, command=command)) == 0
    for path in out.rglob("*"):
        if path.is_file():
            assert b"hunter2pw" not in path.read_bytes(), path
    assert "hunter2pw" not in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"]["url"].startswith("http://***@127.0.0.1:")


def test_redaction_by_hand():
    assert redact_url("http://alice:pw@127.0.0.1:8301/x") == "http://***@127.0.0.1:8301/x"
    assert redact_url("see https://u@h and http://h2:1") == "see https://***@h and http://h2:1"
    assert redact_command(["--server", "http://a:b@h:1"]) == ["--server", "http://***@h:1"]
    assert "b@" not in str(BytesupError("No server at http://a:b@h:1"))


def test_a_server_reported_path_that_is_not_a_gguf_is_never_read(tmp_path, lessons_dir, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET: the combination is 1234\n" * 10)
    answers = dict(SERVER)
    answers["/props"] = (200, {**load_fixture("props")["response"], "model_path": str(secret)})
    out = tmp_path / "run"
    with FakeServer(answers) as server:
        assert run_lessons(["02_quick"], RunOptions(server_url=server.url, out=out)) == 0
    said = capsys.readouterr().err
    assert "TOPSECRE" not in said and "no GGUF file here; it was not read" in said and "--model" in said
    manifest = (out / "manifest.json").read_text()
    assert "TOPSECRE" not in manifest and "sha256" not in json.loads(manifest)["model"]


def test_a_file_that_is_not_a_gguf_is_named_without_its_bytes(tmp_path):
    bad = tmp_path / "not.gguf"
    bad.write_text("TOPSECRET and more text to pass the size check\n")
    with pytest.raises(GGUFError) as err:
        gguf_read.check_gguf(bad)
    assert "TOPSECRE" not in str(err.value) and "does not start with the four bytes GGUF" in str(err.value)


# --- 6. no traceback from any input ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "-1"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(value, tmp_path):
    res = CliRunner().invoke(app, ["run", "01_x", "--timeout", value, "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "Traceback" not in res.output and not isinstance(res.exception, OverflowError)


def test_a_repeat_past_the_limit_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["run", "01_x", "--repeat", "1000000", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "1000" in words(res.output) and "--repeat" in words(res.output)


@pytest.mark.parametrize("port", ["99999", "-1", "0", "http"])
def test_a_port_out_of_range_is_one_paragraph(port, capsys):
    assert engine.main(["start", "--port", port]) == 1
    assert "--port must be a whole number from 1 to 65535" in capsys.readouterr().err
    assert engine.main(["status", "--port", port]) == 1


def write_manifest(folder: Path, data) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("data", [[], [1, 2], "text", {"schema_version": 0}, {"schema_version": -5},
                                  {"schema_version": True}, {"schema_version": 1, "lessons": {"../../x": {}}},
                                  {"schema_version": 1, "lessons": {"01_a": "ok"}}, {"schema_version": 1, "lessons": []}])
def test_a_damaged_manifest_is_one_paragraph(tmp_path, data):
    with pytest.raises((RunFolderError, SchemaError)):
        read_manifest(write_manifest(tmp_path / "run", data))


def test_a_resume_into_a_damaged_manifest_is_one_paragraph(tmp_path, lessons_dir):
    out = write_manifest(tmp_path / "run", [1])
    res = CliRunner().invoke(app, ["run", "02_quick", "--out", str(out), "--resume", "--replay", str(out)])
    assert res.exit_code == 1 and "not an object" in res.output and res.exception is None or isinstance(res.exception, SystemExit)


def test_a_deeply_nested_manifest_is_one_paragraph(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunFolderError, match="too deeply"):
        read_manifest(folder)


def _trap(kind):
    def step(data):
        raise AssertionError(f"a {kind}'s upgrade step ran on the other kind of file")
    return step


def _step(kind, to, ran):
    def step(data):
        ran.append(kind)
        return {**data, "schema_version": to}
    return step


def test_a_manifest_schema_bump_never_runs_a_result_step(monkeypatch):
    from bytesup.store import manifest, results
    from bytesup.store.runs import load_run

    ran: list[str] = []
    monkeypatch.setattr(manifest, "MANIFEST_SCHEMA_VERSION", 2)
    monkeypatch.setitem(manifest.MANIFEST_UPGRADES, 1, _step("manifest", 2, ran))
    monkeypatch.setitem(results.UPGRADES, 1, _trap("result"))
    run = load_run(ROOT / "tests" / "fixtures" / "runs" / "01_model_on_disk")
    assert ran == ["manifest"] and run.manifest.schema_version == 2
    assert list(run.results) == ["01_model_on_disk"] and run.results["01_model_on_disk"].lesson_id == "01_model_on_disk"


def test_a_result_schema_bump_never_runs_a_manifest_step(monkeypatch):
    from bytesup.store import manifest, results
    from bytesup.store.runs import load_run

    ran: list[str] = []
    monkeypatch.setattr(results, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(results.UPGRADES, 1, _step("result", 2, ran))
    monkeypatch.setitem(manifest.MANIFEST_UPGRADES, 1, _trap("manifest"))
    run = load_run(ROOT / "tests" / "fixtures" / "runs" / "01_model_on_disk")
    assert ran == ["result"] and run.manifest.schema_version == 1 and run.results["01_model_on_disk"].schema_version == 2


def test_each_kind_refuses_a_version_only_the_other_kind_has(monkeypatch, tmp_path):
    """A results step for version 1 does not make a version-1 manifest readable by a bytesup at manifest version 2."""
    from bytesup.store import manifest, results

    monkeypatch.setattr(manifest, "MANIFEST_SCHEMA_VERSION", 2)
    monkeypatch.setitem(results.UPGRADES, 1, _trap("result"))
    with pytest.raises(SchemaError, match="run manifest schema version 1, which no bytesup ever wrote"):
        read_manifest(write_manifest(tmp_path / "run", {"schema_version": 1, "lessons": {}}))


def recorded_lesson(folder: Path, lines: list[str]) -> Path:
    from lessonkit import recorded

    source = recorded("01_model_on_disk")
    folder.mkdir(parents=True)
    (folder / "01_model_on_disk.json").write_bytes((source / "01_model_on_disk.json").read_bytes())
    (folder / "http").mkdir()
    (folder / "http" / "01_model_on_disk.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("line", ["[1, 2]", "42", '"text"', "null", "[" * 100_000 + "]" * 100_000])
def test_recording_lines_that_are_not_exchanges_are_one_paragraph(tmp_path, line):
    folder = recorded_lesson(tmp_path / "run", [line])
    with pytest.raises(RunFolderError, match="Line 1 of"):
        load_replay(folder, "01_model_on_disk", allow_modified=True)


def degenerate_gguf(path: Path, tensors: list[tuple[str, list[int]]], nested: int = 0) -> Path:
    """A GGUF written by gguf's writer: F32 tensors of the given shapes, and optionally arrays nested `nested` deep."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    value: list = [1]
    for _ in range(nested):
        value = [value]
    if nested:
        writer.add_array("test.nested", value)
    for name, shape in tensors:
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_without_tensors_or_with_an_empty_one_is_one_paragraph(tmp_path):
    with pytest.raises(GGUFError, match="holds no tensors"):
        gguf_read.read_model_info(degenerate_gguf(tmp_path / "none.gguf", []))
    with pytest.raises(GGUFError, match="with no elements"):
        gguf_read.read_model_info(degenerate_gguf(tmp_path / "empty.gguf", [("token_embd.weight", [0, 4])]))


def test_arrays_nested_too_deep_are_one_paragraph(tmp_path):
    path = degenerate_gguf(tmp_path / "deep.gguf", [("token_embd.weight", [2, 4])], nested=12)
    with pytest.raises(GGUFError, match="nests arrays more than 8 deep"):
        gguf_read.read_model_info(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(min_size=0, max_size=400))
def test_any_bytes_after_the_magic_are_a_gguf_error_never_a_traceback(tmp_path, body):
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + body)
    try:
        gguf_read.read_model_info(path)
    except GGUFError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                         lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                         max_leaves=20))
def test_any_json_as_a_manifest_is_a_manifest_or_one_paragraph(tmp_path, data):
    folder = write_manifest(tmp_path / "fuzz", data)
    try:
        read_manifest(folder)
    except (RunFolderError, SchemaError):
        pass


def test_a_run_killed_outright_reads_as_interrupted_not_running(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        run.kill()
        run.wait()
    folder = tmp_path / "run"
    assert json.loads((folder / "manifest.json").read_text())["lessons"]["01_sleeps"]["status"] == "running"  # as left
    entry = read_manifest(folder).lessons["01_sleeps"]
    assert entry.status == "interrupted" and "process is gone" in entry.error


def test_a_live_run_still_reads_as_running(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        try:
            assert read_manifest(tmp_path / "run").lessons["01_sleeps"].status == "running"
        finally:
            run.kill()
            run.wait()


# --- 3. bodies that are too big, never end, or arrive compressed --------------------------------------

class RawServer:
    """A loopback HTTP server in a thread whose answer to every request is written by `answer(wfile)`."""

    def __init__(self, answer):
        import socketserver
        import threading

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                length = 0
                while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                self.rfile.read(length)  # the request's body, read so that closing never resets the connection
                try:
                    answer(self.wfile)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def endless(wfile):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b" " * 65536
    for _ in range(2000):  # bounded: 130 MB at most, 50 ms apart
        wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        wfile.flush()
        time.sleep(0.05)


def trickle(wfile):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(240):  # four bytes a second, for a minute at most: never a gap as long as the timeout
        wfile.write(b" ")
        wfile.flush()
        time.sleep(0.25)


@pytest.mark.parametrize("answer", [endless, trickle], ids=["endless", "trickle"])
def test_timeout_bounds_the_whole_answer(answer):
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import AnswerTooLarge, ServerTimeout
    from bytesup.llama.recording import RecordingTransport

    for transport in (None, "recording"):
        sink: list = []
        with RawServer(answer) as server:
            client = LlamaServer(server.url, timeout=1.0, transport=RecordingTransport(sink) if transport else None)
            began = time.monotonic()
            with pytest.raises((ServerTimeout, AnswerTooLarge)):
                client.completion("x", n_predict=1, n_probs=8)
            assert time.monotonic() - began < 4.0  # --timeout 1, and a little for the watchdog
            assert sink == []  # nothing recorded of an answer that never ended


def test_an_answer_past_its_limit_is_refused_and_not_recorded(monkeypatch):
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import AnswerTooLarge
    from bytesup.llama.recording import RecordingTransport, answer_limit

    # One token with its eight candidates, and a text long enough to pass the limit for what was asked.
    limit = answer_limit("/completion", {"n_predict": 1, "n_probs": 8})
    probs = [{"id": 1, "token": "x", "bytes": [120], "logprob": -3.0,
              "top_logprobs": [{"id": i, "token": "x", "bytes": [120], "logprob": -3.0} for i in range(8)]}]
    body = json.dumps({"content": "x" * (limit + 1), "completion_probabilities": probs,
                       "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1, "predicted_ms": 1.0}}).encode()
    assert len(body) > limit

    def big(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    sink: list = []
    with RawServer(big) as server:
        with pytest.raises(AnswerTooLarge, match="BYTESUP_MAX_ANSWER_MB"):
            LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
        assert sink == []
        monkeypatch.setenv("BYTESUP_MAX_ANSWER_MB", "100")  # the way to accept it on purpose
        done = LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
        assert len(done.content) == limit + 1 and len(done.completion_probabilities) == 1 and len(sink) == 1


def test_limits_by_hand():
    from bytesup.llama.recording import answer_limit

    assert answer_limit("/completion", {"n_predict": 1, "n_probs": 8}) == 4_000_000 + 2 * (512 + 8 * 512)
    assert answer_limit("/completion", {"n_predict": 128}) == 4_000_000 + 129 * 512
    assert answer_limit("/completion", {"n_predict": -1}) == 4_000_000 + 8193 * 512
    assert answer_limit("/props", None) == 16_000_000


def test_a_gzip_answer_is_read_once_and_recorded_decoded():
    import gzip

    from bytesup.llama.client import LlamaServer
    from bytesup.llama.recording import RecordingTransport

    props = load_fixture("props")["response"]
    packed = gzip.compress(json.dumps(props).encode())

    def zipped(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(packed) + packed)

    sink: list = []
    with RawServer(zipped) as server:
        assert LlamaServer(server.url, transport=RecordingTransport(sink)).props().model_path == props["model_path"]
        assert LlamaServer(server.url).props().model_path == props["model_path"]
    assert sink[0]["response"] == props


# --- 4. numbers a server should never send -------------------------------------------------------------

def completion_with(**changes):
    body = json.loads(json.dumps(load_fixture("completion_logprobs")["response"]))
    for path, value in changes.items():
        node = body
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        node[keys[-1]] = value
    return body


@pytest.mark.parametrize("change,field", [
    ({"completion_probabilities__0__top_logprobs__0__logprob": float("nan")}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": 5.0}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": float("-inf")}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": -1e308}, None),  # finite and ≤ 0: a real (tiny) probability
    ({"timings__prompt_ms": -5.0}, "prompt_ms"),
    ({"timings__predicted_n": -1}, "predicted_n"),
    ({"timings__predicted_ms": 0.0, "timings__predicted_n": 5}, "timings"),
])
def test_numbers_no_server_sends_are_named_with_the_build(change, field):
    from bytesup.llama import responses as r
    from bytesup.errors import ImplausibleValue

    body = completion_with(**change)
    if field is None:
        r.parse(r.Completion, body, path="/completion")
        return
    with pytest.raises(ImplausibleValue) as err:
        r.parse(r.Completion, body, path="/completion", build="b4321-test")
    text = str(err.value)
    assert "/completion" in text and field in text and "b4321-test" in text and "no llama.cpp server sends" in text


def test_a_probability_past_one_is_named():
    from bytesup.llama import responses as r
    from bytesup.errors import ImplausibleValue

    body = json.loads(json.dumps(load_fixture("completion_post_sampling")["response"]))
    body["completion_probabilities"][0]["top_probs"][0]["prob"] = 7.5
    with pytest.raises(ImplausibleValue, match="prob = 7.5"):
        r.parse(r.Completion, body, path="/completion")


def test_a_recording_of_a_nan_answer_is_strict_json():
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import ImplausibleValue
    from bytesup.llama.recording import RecordingTransport

    body = json.dumps(completion_with(completion_probabilities__0__top_logprobs__0__logprob=float("nan"))).encode()
    assert b"NaN" in body

    def nan(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    sink: list = []
    with RawServer(nan) as server:
        with pytest.raises(ImplausibleValue):
            LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
    line = json.dumps(sink[0], allow_nan=False)  # strict: the server's NaN kept as the text it sent
    assert '"logprob": "NaN"' in line


# --- 7. smaller -------------------------------------------------------------------------------------

def test_token_pieces_with_markdown_characters_stay_text_in_a_cell():
    from bytesup.store.escape import md_text

    assert md_text("`code` *em* ~~gone~~", cell=True) == "\\`code\\` \\*em\\* \\~\\~gone\\~\\~"
    assert md_text(" *", cell=True) == " \\*"
    assert md_text("`--repeat`") == "`--repeat`"  # outside a cell, a lesson's own note keeps its code spans


def test_a_lesson_table_with_such_pieces_renders_them_escaped(tmp_path):
    from bytesup.store.render import lesson_md
    from bytesup.store.results import Column, LessonResult, Table

    result = LessonResult(lesson_id="04_next_token", title="T", started_at="a", finished_at="b",
                          tables=[Table(name="t", title="Top", columns=[Column(name="piece", unit="")],
                                        rows=[["`x`"], ["**bold**"]])])
    text = lesson_md(result)
    assert "| \\`x\\` |" in text and "| \\*\\*bold\\*\\* |" in text


def test_one_thread_keeps_every_deadline_and_a_cancelled_one_never_fires():
    import socket as socketlib
    import threading

    from bytesup.llama import recording

    a, b = socketlib.socketpair()
    c, d = socketlib.socketpair()
    try:
        before = threading.active_count()
        kept = recording._WATCHDOG.arm(a, time.perf_counter() + 0.3)
        cancelled = recording._WATCHDOG.arm(c, time.perf_counter() + 0.1)
        cancelled.cancel()
        time.sleep(0.6)
        assert threading.active_count() <= before + 1  # one thread for all of them, not one per deadline
        assert kept.sock is None and a.recv(1) == b""  # shut at its deadline: a read returns at once
        d.sendall(b"x")
        assert c.recv(1) == b"x"  # the cancelled one's socket still works
    finally:
        for s in (a, b, c, d):
            s.close()


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                           max_leaves=25)


@settings(max_examples=80, deadline=None)
@given(data=json_values)
def test_any_json_as_a_server_answer_is_a_record_or_one_paragraph(data):
    from bytesup.llama import responses as r

    for model, path in ((r.Completion, "/completion"), (r.Props, "/props"), (r.Tokenized, "/tokenize"),
                        (r.Timings, "/completion")):
        try:
            r.parse(model, data, path=path)
        except BytesupError:  # anything else (a KeyError, a TypeError) fails the test
            pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(max_size=40) | json_values.map(json.dumps), max_size=4))
def test_any_recording_lines_replay_or_are_one_paragraph(tmp_path, lines):
    import shutil

    folder = tmp_path / "fuzzrun"
    shutil.rmtree(folder, ignore_errors=True)
    recorded_lesson(folder, [ln.replace("\n", " ") for ln in lines])
    try:
        load_replay(folder, "01_model_on_disk", allow_modified=True)
    except RunFolderError:
        pass


# --- the manifest as a typed record ---------------------------------------------------------------------------

def committed_manifests() -> list[Path]:
    return sorted([*ROOT.glob("outputs/*/manifest.json"), *ROOT.glob("tests/fixtures/runs/*/manifest.json")])


@pytest.mark.parametrize("path", committed_manifests(), ids=lambda p: p.parent.name)
def test_every_committed_manifest_reads_and_writes_back_unchanged(path):
    from bytesup.store.manifest import Manifest

    data = json.loads(path.read_text(encoding="utf-8"))
    manifest = Manifest.parse(json.loads(json.dumps(data)), str(path))
    assert manifest.to_json() == data
    assert manifest.kind == "bytesup-run" and all(e.status == "ok" for e in manifest.lessons.values())


def test_fields_this_bytesup_does_not_know_are_kept_and_written_back(tmp_path):
    from bytesup.store.manifest import Manifest

    data = {"schema_version": 1, "kind": "bytesup-run", "from_a_newer_bytesup": {"x": [1, None]},
            "host": {"hostname": "h", "numa_nodes": 2}, "lessons": {"01_a": {"status": "ok", "json": "01_a.json", "tokens": 7}}}
    manifest = read_manifest(write_manifest(tmp_path / "run", data))
    assert manifest.host.hostname == "h" and manifest.lessons["01_a"].json_file == "01_a.json"
    manifest.lessons["01_a"].seconds = 1.5
    written = manifest.to_json()
    assert written["from_a_newer_bytesup"] == {"x": [1, None]} and written["host"] == {"hostname": "h", "numa_nodes": 2}
    assert written["lessons"]["01_a"] == {"status": "ok", "json": "01_a.json", "seconds": 1.5, "tokens": 7}
    assert Manifest.parse(written, "again").to_json() == written


@pytest.mark.parametrize("data, where", [({"schema_version": 1, "host": {"cores": "many"}}, "host.cores"),
                                         ({"schema_version": 1, "command": "bytesup run"}, "command"),
                                         ({"schema_version": 1, "lessons": {"01_a": {"seconds": "long"}}}, "lessons.01_a.seconds")])
def test_a_known_field_of_the_wrong_type_is_one_paragraph_that_names_it(tmp_path, data, where):
    with pytest.raises(RunFolderError, match=rf"is not a run manifest this bytesup can read: {re.escape(where)}: ") as caught:
        read_manifest(write_manifest(tmp_path / "run", data))
    assert "\n" not in str(caught.value) and "re-run the lessons into a new folder" in str(caught.value)


LESSON_SWALLOWS = '''"""Signals itself from inside a __del__, where Python drops the exception the handler raises."""
import os, signal, time
TITLE = "Swallows a stop (test)"
class Sends:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, inside __del__: its exception is printed and dropped
def main(ctx):
    Sends()
    return ctx.finish()
'''


def test_a_stop_whose_exception_python_dropped_still_stops_the_run(tmp_path, lessons_dir):
    """SIGTERM while an exception cannot propagate (in a __del__): the lesson is interrupted, not ok, and the run
    ends with 143, where before it finished as if no signal had come (exit 0, status ok)."""
    (lessons_dir / "04_swallows.py").write_text(LESSON_SWALLOWS)
    with FakeServer(SERVER) as server:
        done = subprocess.run([sys.executable, "-m", "bytesup", "run", "04_swallows", "--server", server.url,
                               "--out", str(tmp_path / "run")], env=os.environ, capture_output=True, text=True,
                              timeout=60)
    assert "Exception ignored" in done.stderr  # the case itself: Python dropped the handler's exception
    assert done.returncode == 143, done.stdout + done.stderr
    entry = json.loads((tmp_path / "run" / "manifest.json").read_text())["lessons"]["04_swallows"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"]
