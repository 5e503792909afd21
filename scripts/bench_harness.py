"""The harness's own time per request, against a bare client, in one sitting.

    .venv/bin/python scripts/bench_harness.py                 # starts the embedded server on the default model
    .venv/bin/python scripts/bench_harness.py --url http://127.0.0.1:8099   # a server already running
    .venv/bin/python scripts/bench_harness.py --profile       # and where the harness's requests spend their CPU

For n_probs 0 and 8 it sends the same /completion (n_predict 32, greedy, seeded) `--requests` times from each of
two clients, interleaved in pairs whose order alternates: `BareClient` (http.client, json.loads, nothing else) and
the run's own (`LlamaServer.completion` over a `RecordingTransport`, every check on). Each request's part outside
the server's timings is its client wall time minus `prompt_ms + predicted_ms`. It prints three parts:

- the server outside its timings: the bare client's part (tokenizing, the top-n probabilities, building the JSON);
- the harness: the run's client's part minus the bare client's, pair by pair, so the machine's load cancels;
- the harness's CPU: the CPU the run's client's thread spent over its request's wall time (time.thread_time) minus
  the bare client's over its own, pair by pair. Where it is as large as the harness's part, that part is the client's
  own work (reading, checking, recording), not waiting;
- waiting for a slot: two requests sent together to a server with two slots, their part minus the harness's alone.

Medians with the 10th and 90th percentiles; nothing here is asserted, the machine's load moves every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bytesup.llama.client import BareClient, LlamaServer  # noqa: E402
from bytesup.llama.process import free_port  # noqa: E402
from bytesup.llama.recording import RecordingTransport  # noqa: E402
from bytesup.run.harness import PROMPT, outside_ms, request_body  # noqa: E402

MODEL = ROOT / "models" / "smollm2-135m-q4_1.gguf"


@contextlib.contextmanager
def embedded_server(model: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bytesup.llama.embedded", "-m", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "-c", "2048", "--parallel", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the embedded server exited with {proc.returncode}")
            try:
                if LlamaServer(url).health().status == "ok":
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the embedded server did not answer /health within 180 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    qs = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    return f"{statistics.median(values):6.2f} ms  (p10 {qs[0]:.2f}, p90 {qs[-1]:.2f}, n {len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a server already running (default: start the embedded one on the default model)")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--requests", type=int, default=15, help="pairs per n_probs (default 15)")
    parser.add_argument("--n-predict", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="cProfile the harness's requests on the thread's CPU "
                        "clock and print the functions that took the most CPU of their own")
    args = parser.parse_args()

    with (contextlib.nullcontext(args.url) if args.url else embedded_server(args.model)) as url:
        sink: list[dict] = []
        server = LlamaServer(url, transport=RecordingTransport(sink, "main"))
        bare = BareClient(url)
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        for n_probs in (0, 8):
            body = request_body(n_probs, args.n_predict)
            raw = json.dumps({"prompt": PROMPT, **body}).encode()
            for _ in range(2):  # warm: the prompt cached, both connections open
                outside_ms(server, body)
                bare.completion_ms(raw)
            bares, parts, own_cpu, cpu_parts = [], [], [], []
            for i in range(args.requests):
                wall, timed = bare.completion_ms(raw) if i % 2 else (0.0, 0.0)
                bare_cpu = bare.cpu_ms
                if profile is not None:
                    profile.enable()
                own = outside_ms(server, body, own_cpu)
                if profile is not None:
                    profile.disable()
                if not i % 2:
                    wall, timed = bare.completion_ms(raw)
                    bare_cpu = bare.cpu_ms
                bares.append(wall - timed)
                parts.append(own - (wall - timed))
                cpu_parts.append(own_cpu[-1] - bare_cpu)
            sink.clear()
            print(f"n_probs {n_probs}, n_predict {args.n_predict}, {args.requests} pairs:")
            print(f"  the server outside its timings  {spread(bares)}")
            print(f"  the harness                     {spread(parts)}")
            print(f"  the harness's CPU               {spread(cpu_parts)}  (the run's client's CPU {statistics.median(own_cpu):.2f} ms)")
            if n_probs == 0:
                alone = [outside_ms(server, body) for _ in range(4)]
                together: list[float] = []
                with ThreadPoolExecutor(2) as pool:
                    for _ in range(4):
                        together += pool.map(lambda b: outside_ms(server, b), [body, {**body, "seed": 43}])
                print(f"  waiting for a slot (2 at once)  {statistics.median(together) - statistics.median(alone):6.2f} ms"
                      f"  (together {statistics.median(together):.2f}, alone {statistics.median(alone):.2f})")
        bare.close()
        server.close()
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(45)


if __name__ == "__main__":
    main()
