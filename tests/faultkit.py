"""Helpers the fault tests share: a folder of small lessons, a stand-in llama-server's answers, a run started in
a process of its own, a raw HTTP server, and the one-paragraph promise every BytesupError keeps."""

from __future__ import annotations

import io
import re
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from bytesup.errors import BytesupError
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from fakes import SHUTDOWN_POLL_S
from test_engine_faults import wait_for
from test_runner import serve, URL


cli = CliRunner()


def console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400, soft_wrap=True), buf


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def flat(text: str) -> str:
    return text.replace("\n", "")


def live_run(httpx_mock, tmp_path) -> Path:
    serve(httpx_mock)
    live = tmp_path / "live"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=live)) == 0
    return live


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


@pytest.fixture
def lessons_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_sleeps.py").write_text(LESSON_SLEEPS)
    (folder / "02_quick.py").write_text(LESSON_QUICK)
    (folder / "03_quick.py").write_text(LESSON_QUICK)
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    return folder


def start_run(tmp_path, lessons_dir, url: str, *extra: str, parent: bool = False, env: dict | None = None):
    mark = tmp_path / "mark"
    env = {**os.environ, "MARK": str(mark), **(env or {})}
    argv = [sys.executable, "-m", "bytesup", "run", "01_sleeps", "--server", url, "--out", str(tmp_path / "run"), *extra]
    if parent:  # a shell in between, as make is: the run's parent, killed in the test
        argv = ["bash", "-c", " ".join(f"'{a}'" for a in argv) + "; sleep 60"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for(mark.exists)
    return proc


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
        self.thread = threading.Thread(target=self.server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def completion_with(**changes):
    body = json.loads(json.dumps(load_fixture("completion_logprobs")["response"]))
    for path, value in changes.items():
        node = body
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        node[keys[-1]] = value
    return body


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                           max_leaves=25)


# The verbs a message's advice starts with: what the reader does next.
ADVICE = ("add", "build", "check", "choose", "delete", "drop", "fetch", "fix", "free", "give", "make", "name", "open",
          "pass", "point", "raise", "re-record", "re-run", "read", "rebuild", "remove", "repair", "replace", "report",
          "restart", "restore", "resume", "run", "serve", "set", "start", "try", "unset", "use", "wait", "write")


def says_what_to_do(message: str) -> bool:
    """Whether a sentence or a clause of `message` (after a full stop, a colon, a semicolon, ", or" or ", then")
    starts with advice: a verb of ADVICE in the imperative."""
    clauses = re.split(r"(?<=[.?!:;])\s+|,\s+or\s+|,\s+then\s+", message)
    return any(c.split()[0].strip("`(").lower() in ADVICE for c in clauses if c.split())


def assert_one_paragraph(exc: BaseException) -> None:
    """The promise every error a user can meet keeps: a BytesupError whose message is one paragraph (one line, ended
    by a full stop) that says what to do. Anything else (a KeyError, a bare ValueError) fails the test that calls it."""
    assert isinstance(exc, BytesupError), f"{type(exc).__name__} escaped: {exc}"
    message = str(exc)
    assert message.strip() and "\n" not in message, f"not one paragraph: {message!r}"
    assert message.rstrip().endswith((".", ".)", ".`")), f"not a finished sentence: {message!r}"
    assert says_what_to_do(message), f"says nothing to do: {message!r}"

