"""Every wait for a server's answer comes from the run's --timeout, or from a constant named once in
`bytesup.llama.process` where no run gives one; every client of a run is made by `RunOptions.client`."""

from __future__ import annotations

import re
import types
from pathlib import Path

from bytesup.lesson import LessonContext, Reporter
from bytesup.llama import process
from bytesup.options import RunOptions

ROOT = Path(__file__).resolve().parents[1]


def test_a_runs_client_takes_the_runs_key_and_timeout_and_a_lessons_own_server_no_key():
    options = RunOptions(command=["t"], api_key="sk-run", timeout=7.5)
    with options.client("http://127.0.0.1:1") as client:
        assert client.timeout == 7.5 and client._http.headers["Authorization"] == "Bearer sk-run"
    with options.client("http://127.0.0.1:1", with_key=False) as own:
        assert own.timeout == 7.5 and "Authorization" not in own._http.headers


def test_the_run_and_the_lesson_api_make_clients_in_one_place():
    """`LlamaServer(` is written in options.py alone among the modules that run lessons (the client's own package and
    the command line's `server status`, which has no run, aside)."""
    makers = []
    for path in sorted((ROOT / "src" / "bytesup").rglob("*.py")):
        rel = path.relative_to(ROOT / "src" / "bytesup").as_posix()
        if rel.startswith("llama/"):
            continue
        makers += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if "LlamaServer(" in line]
    assert [m.split(":")[0] for m in makers] == ["cli/app.py", "options.py"], makers
    app = (ROOT / "src" / "bytesup" / "cli" / "app.py").read_text()
    assert "LlamaServer(url, timeout=process.STATUS_WAIT_S)" in app


def test_no_wait_is_a_bare_number_of_seconds():
    """The waits for a server's answer around its start and in `server status` are named constants or the run's
    --timeout (a subprocess's own limit, such as `llama-server --help`'s, is not a server's answer)."""
    for rel in ("llama/process.py", "cli/app.py", "run/server.py", "lesson.py", "run/runner.py"):
        calls = [line for line in (ROOT / "src" / "bytesup" / rel).read_text().splitlines()
                 if "httpx." in line or "LlamaServer(" in line]
        assert calls or rel != "llama/process.py"
        assert not [c for c in calls if re.search(r"timeout=\d", c)], rel


class Proc:
    pid = 4242

    def poll(self):
        return None


def test_a_servers_start_waits_as_long_as_the_run_says(monkeypatch, tmp_path):
    waits = []

    def get(url, headers, timeout):
        waits.append((url.rsplit("/", 1)[1], timeout))
        body = {"status": "ok"} if url.endswith("/health") else {"build_info": "b1"}
        return types.SimpleNamespace(status_code=200, json=lambda: body)

    monkeypatch.setattr(process.httpx, "get", get)
    chosen = process.EngineChoice(kind="embedded", command=["python"], source="embedded", why="test")
    for answer_s, expected in [(300.0, [("health", process.READY_POLL_S), ("props", 300.0)]),
                               (0.5, [("health", 0.5), ("props", 0.5)]),
                               (None, [("health", process.READY_POLL_S), ("props", process.PROPS_WAIT_S)])]:
        waits.clear()
        given = {} if answer_s is None else {"answer_s": answer_s}
        try:
            process._wait_ready(Proc(), chosen, {}, tmp_path / "m.gguf", "127.0.0.1", 8123, tmp_path, 5.0, **given)
        except Exception:  # noqa: BLE001 - what follows the wait (engine facts) needs a real server; the waits are read before
            pass
        assert waits == expected


def test_a_lessons_own_server_starts_and_answers_within_the_runs_timeout(monkeypatch, tmp_path):
    seen = {}

    def start_server(model, flags, die_with_parent, native, answer_s, stop_check):
        seen.update(flags=flags, answer_s=answer_s)
        return types.SimpleNamespace(url="http://127.0.0.1:9")

    monkeypatch.setattr(process, "start_server", start_server)
    monkeypatch.setattr(process, "stop_server", lambda port: True)
    ctx = LessonContext("t", "t", server=None, run=RunOptions(command=["t"], timeout=42.0, api_key="sk"),  # type: ignore[arg-type]
                        model_path=None, sink=[], replay=None, progress=Reporter(None, "t"))
    with ctx.local_server("own", None, ["-c", "256"]) as client:
        assert client.timeout == 42.0 and "Authorization" not in client._http.headers
    assert seen["answer_s"] == 42.0 and seen["flags"][-2:] == ["-c", "256"]


def test_a_server_started_for_the_run_waits_its_timeout(monkeypatch, tmp_path):
    import contextlib

    from rich.console import Console

    from bytesup.run import server

    seen = {}

    def start_server(model, flags, die_with_parent, answer_s):
        seen["answer_s"] = answer_s
        return types.SimpleNamespace(url="http://127.0.0.1:9", info={"choice": {"why": "test"}})

    monkeypatch.setattr(process, "start_server", start_server)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with contextlib.ExitStack() as cleanup:
        monkeypatch.setattr(process, "stop_server", lambda port: False)
        server.start_run_server("http://127.0.0.1:8099", RunOptions(command=["t"], model=model, timeout=33.0),
                                Console(file=open("/dev/null", "w")), cleanup)
    assert seen["answer_s"] == 33.0
