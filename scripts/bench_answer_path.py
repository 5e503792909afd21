"""The client's CPU per /completion answer, in-process, against a bare `json.loads`: no server, no network.

    .venv/bin/python scripts/bench_answer_path.py                    # the committed answers, n_probs 0, 8 and 64
    .venv/bin/python scripts/bench_answer_path.py --profile 8        # and cProfile the full path at n_probs 8
    .venv/bin/python scripts/bench_answer_path.py --answer a.json --request r.json   # an answer of your own
    .venv/bin/python scripts/bench_answer_path.py --socket           # and over a socket, from a server process

The answers are real: tests/fixtures/answers/harness_np{0,8,64}.json hold the bytes the embedded server wrote (default
model, `bytesup.run.harness`'s request: n_predict 32, greedy, seeded) and `.request.json` beside each the request.
For each answer it times, per answer, on the process's CPU clock (time.process_time, so the other work of a shared
machine moves it less than a wall clock would):

- bare: `json.loads` of the body, what `llama.client.BareClient` does with it;
- parse: the body to a checked `responses.Completion`, as the client reads it (`recording.answer_json`,
  `responses.parse`, `responses.check_asked`);
- client: `LlamaServer.completion` over a `RecordingTransport` whose inner transport hands over the answer from memory:
  the request built, recorded, the answer read, parsed once, checked and recorded, as in a run, less the socket.

and prints each one's median µs over `--rounds` rounds of `--repeats` answers (the three in turns in each round), with
the client's minus the bare one's:
the CPU that the harness's own part of a request spends in this process (`bytesup.run.harness` measures it live,
with the wall time its CPU adds on a busy machine).

With --socket it also sends the request to a small HTTP server in a process of its own that answers at once with the
answer's bytes (llama-server's headers, the connection kept), from `BareClient` and from the run's client (over a
`RecordingTransport` on the project's transport) in turns, and prints the CPU and wall µs per request of each: the
transport's part too. Nothing here is asserted; the figures are the machine's.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bytesup.llama import responses  # noqa: E402
from bytesup.llama.client import BareClient, LlamaServer  # noqa: E402
from bytesup.llama.recording import RecordingTransport, answer_json  # noqa: E402
from bytesup.llama.transport import AnswerBody  # noqa: E402

ANSWERS = ROOT / "tests" / "fixtures" / "answers"


class _Whole(AnswerBody):
    """An answer body already in memory, read whole at once as the project's transport reads one with a length."""

    def __init__(self, body: bytes):  # no socket: none of AnswerBody's state is used
        self._body = body
        self.received = 0

    @property
    def length(self) -> int | None:
        return len(self._body)

    def whole(self, deadline: float | None = None) -> bytes | None:
        self.received = len(self._body)
        return self._body

    def __iter__(self) -> Iterator[bytes]:
        yield self._body

    def close(self) -> None:
        pass


class _Memory(httpx.BaseTransport):
    """Answers every request with the same bytes, with the headers llama-server sends."""

    def __init__(self, body: bytes):
        self.body = body
        self.headers = [(b"Keep-Alive", b"timeout=5, max=100"), (b"Content-Type", b"application/json; charset=utf-8"),
                        (b"Server", b"llama.cpp"), (b"Content-Length", str(len(body)).encode()),
                        (b"Access-Control-Allow-Origin", b"")]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, headers=self.headers, stream=_Whole(self.body),
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": b"OK"})


def timed_us(works: dict[str, Callable[[], Any]], rounds: int, repeats: int) -> dict[str, float]:
    """The median over `rounds` of the CPU µs one call of each work takes, each round `repeats` calls of each in turn
    (so a change in the machine's load moves them alike)."""
    samples: dict[str, list[float]] = {what: [] for what in works}
    for work in works.values():
        work()
    for _ in range(rounds):
        for what, work in works.items():
            started = time.process_time()
            for _ in range(repeats):
                work()
            samples[what].append((time.process_time() - started) / repeats * 1e6)
    return {what: statistics.median(taken) for what, taken in samples.items()}


def paths(body: bytes, request: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    prompt = request["prompt"]
    settings = {k: v for k, v in request.items() if k != "prompt"}
    sink: list[dict[str, Any]] = []
    client = LlamaServer("http://127.0.0.1:8099", api_key="", transport=RecordingTransport(sink, inner=_Memory(body)))

    def parse() -> responses.Completion:
        answer = responses.parse(responses.Completion, answer_json(body), path="/completion")
        responses.check_asked(answer, settings, path="/completion")
        return answer

    def full() -> responses.Completion:
        sink.clear()
        return client.completion(prompt, **settings)

    return {"bare": lambda: json.loads(body), "parse": parse, "client": full}


# An HTTP/1.1 server that answers every POST with the bytes of the file named in argv[1], on the port it prints.
_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
body = open(sys.argv[1], "rb").read()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        for name, value in (("Keep-Alive", "timeout=5, max=100"), ("Content-Type", "application/json; charset=utf-8"),
                            ("Server", "llama.cpp"), ("Content-Length", str(len(body)))):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def over_socket(answer: Path, request: dict[str, Any], requests: int) -> dict[str, tuple[float, float]]:
    """(median CPU µs, median wall µs) per request of the bare client and the run's client, in turns, against a server
    process that answers with `answer` at once."""
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(answer)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        bare = BareClient(url)
        sink: list[dict[str, Any]] = []
        client = LlamaServer(url, api_key="", transport=RecordingTransport(sink))
        prompt, settings = request["prompt"], {k: v for k, v in request.items() if k != "prompt"}
        raw = json.dumps(request).encode()

        def own() -> None:
            sink.clear()
            client.completion(prompt, **settings)

        works = {"bare": lambda: bare.timed(raw), "client": own}
        times: dict[str, tuple[list[float], list[float]]] = {what: ([], []) for what in works}
        for work in works.values():  # both connections open
            work()
        for n in range(requests):
            for what in (("bare", "client") if n % 2 else ("client", "bare")):
                cpu, wall = time.process_time(), time.perf_counter()
                works[what]()
                times[what][0].append((time.process_time() - cpu) * 1e6)
                times[what][1].append((time.perf_counter() - wall) * 1e6)
        bare.close()
        client.close()
        return {what: (statistics.median(cpu), statistics.median(wall)) for what, (cpu, wall) in times.items()}
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answer", type=Path, help="an answer's bytes (default: the committed ones)")
    parser.add_argument("--request", type=Path, help="the request the answer answers (with --answer)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--profile", type=int, metavar="N_PROBS", help="cProfile the client's path on this answer")
    parser.add_argument("--socket", type=int, nargs="?", const=400, metavar="REQUESTS",
                        help="also send each request REQUESTS times (400) over a socket from each client")
    args = parser.parse_args()
    if (args.answer is None) != (args.request is None):
        parser.error("--answer and --request go together")
    if args.answer is not None:
        cases = {args.answer.stem: (args.answer, args.request)}
    else:
        cases = {f"n_probs {n}": (ANSWERS / f"harness_np{n}.json", ANSWERS / f"harness_np{n}.request.json")
                 for n in (0, 8, 64)}
    gc.collect()
    print(f"{'answer':<12} {'bytes':>7} {'bare µs':>9} {'parse µs':>9} {'client µs':>10} {'client − bare':>14}")
    for name, (answer, request_path) in cases.items():
        body, request = answer.read_bytes(), json.loads(request_path.read_text(encoding="utf-8"))
        repeats = max(3, args.repeats * 27_000 // max(len(body), 27_000))  # about as long a round at every size
        works = paths(body, request)
        us = timed_us(works, args.rounds, repeats)
        print(f"{name:<12} {len(body):>7} {us['bare']:>9.1f} {us['parse']:>9.1f} {us['client']:>10.1f} "
              f"{us['client'] - us['bare']:>14.1f}")
        if args.profile is not None and name == f"n_probs {args.profile}":
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(repeats * 5):
                works["client"]()
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    if args.socket:
        print(f"\nover a socket, {args.socket} requests a client in turns: median µs per request (CPU of this process, wall)")
        print(f"{'answer':<12} {'bare CPU':>9} {'wall':>8} {'client CPU':>11} {'wall':>8} {'CPU diff':>9} {'wall diff':>10}")
        for name, (answer, request_path) in cases.items():
            got = over_socket(answer, json.loads(request_path.read_text(encoding="utf-8")), args.socket)
            (bare_cpu, bare_wall), (own_cpu, own_wall) = got["bare"], got["client"]
            print(f"{name:<12} {bare_cpu:>9.1f} {bare_wall:>8.1f} {own_cpu:>11.1f} {own_wall:>8.1f} "
                  f"{own_cpu - bare_cpu:>9.1f} {own_wall - bare_wall:>10.1f}")


if __name__ == "__main__":
    main()
