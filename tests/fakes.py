"""Fake servers for bad or abnormal server behaviour (never in place of the real engine for the
normal path): a llama-server stand-in started as a process through LLAMA_SERVER, and a tiny
HTTP server in a thread that answers what the test tells it to."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

# How often a fake server's loop looks for its shutdown (socketserver's default, 0.5 s, made every `with` block wait
# up to that long when it closed).
SHUTDOWN_POLL_S = 0.01

# A stand-in for a llama-server binary: answers /health and /props on --port, requires
# LLAMA_API_KEY as a Bearer token when set, and writes its argv and key to $FAKE_RECORD.
FAKE_ENGINE = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
record = os.environ.get("FAKE_RECORD")
if record:
    with open(record, "w") as f:
        json.dump({"argv": sys.argv, "LLAMA_API_KEY": os.environ.get("LLAMA_API_KEY")}, f)
time.sleep(float(os.environ.get("FAKE_START_DELAY", "0")))
key = os.environ.get("LLAMA_API_KEY")
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self.send_response(401); self.end_headers(); return
        body = {"/health": {"status": "ok"}, "/props": {"build_info": "b1-fake", "model_path": "fake.gguf"}}.get(self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(data)))
        self.end_headers(); self.wfile.write(data)
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def fake_engine(folder: Path) -> Path:
    """An executable llama-server stand-in, for LLAMA_SERVER."""
    path = folder / "fake-llama-server"
    path.write_text(f"#!{sys.executable}\n{FAKE_ENGINE}")
    path.chmod(0o755)
    return path


Answer = tuple[int, dict | str]


class FakeServer:
    """An HTTP server in a thread; `answers[path]` gives (status, JSON or text) or a callable."""

    def __init__(self, answers: dict[str, Answer | Callable[[dict | None], Answer]]):
        self.answers = answers
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: dict | None) -> None:
                answer = outer.answers.get(self.path.split("?")[0], (404, {"error": "not found"}))
                status, payload = answer(body) if callable(answer) else answer
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer(None)

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self._answer(json.loads(self.rfile.read(n) or b"null"))

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# A stand-in for a native build's program that crashes as ggml's AMX kernels do on some virtualized Xeons:
# it kills itself with SIGSEGV (rc -11), as llama-server does while warming up the model.
CRASHING_PROGRAM = r'''
import os, signal
os.kill(os.getpid(), signal.SIGSEGV)
'''

# A stand-in for llama-bench that runs: one row for the prefill, one for the decode, as `-o json` prints them.
WORKING_BENCH = r'''
import json
print(json.dumps([{"n_prompt": 16, "n_gen": 0, "avg_ts": 250.0}, {"n_prompt": 0, "n_gen": 4, "avg_ts": 80.0}]))
'''


def stand_in_build(folder: Path, crashes: bool) -> Path:
    """A folder with llama-server, llama-bench and rpc-server stand-ins: all crash with SIGSEGV when
    `crashes`, else llama-bench prints results and llama-server is the FAKE_ENGINE stand-in."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = {"llama-server": CRASHING_PROGRAM if crashes else FAKE_ENGINE,
               "llama-bench": CRASHING_PROGRAM if crashes else WORKING_BENCH,
               "rpc-server": CRASHING_PROGRAM}
    for name, source in sources.items():
        (folder / name).write_text(f"#!{sys.executable}\n{source}")
        (folder / name).chmod(0o755)
    return folder


class StreamingFakeServer:
    """An HTTP server in a thread that answers every POST with a streamed body: `parts` is a list of
    bytes (each written and flushed as it comes) and numbers (seconds to wait before the next part);
    a callable part is called for bytes on each pass of an endless stream (see `forever`).
    `chunked` sends HTTP/1.1 chunked encoding and ends with its terminating chunk unless `cut`, which
    closes the connection mid-body; without `chunked` the body ends when the connection closes."""

    def __init__(self, parts: list, chunked: bool = True, cut: bool = False, forever: bytes | None = None,
                 every_s: float = 0.05):
        outer = self
        self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if chunked else "HTTP/1.0"

            def _write(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for part in parts:
                        if isinstance(part, (int, float)):
                            outer.stop.wait(part)
                        else:
                            self._write(part)
                    while forever is not None and not outer.stop.is_set():
                        self._write(forever)
                        outer.stop.wait(every_s)
                    if chunked and not cut:
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    return
                self.close_connection = True

            def log_message(self, *a: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True)

    def __enter__(self) -> "StreamingFakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
