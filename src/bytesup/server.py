"""The embedded engine: llama.cpp's own HTTP server, run in-process through the xllamacpp wheel.

    python -m bytesup.server -m MODEL.gguf --host 127.0.0.1 --port 8099 -c 2048 --metrics

It takes the llama-server flags the course uses and serves the same API (/health, /props,
/completion, /tokenize, /detokenize, /metrics, /slots, /v1/models) until SIGTERM or Ctrl-C.
`scripts/start_server.sh` runs it when no `llama-server` binary is found.

An API key is read, as llama-server reads it, from the LLAMA_API_KEY environment variable or from
--api-key-file (one key per line), so that it never shows in `ps`; --api-key still works.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bytesup.server",
        description="llama.cpp's server, embedded through xllamacpp; flags as llama-server's.",
    )
    p.add_argument("-m", "--model", required=True, help="GGUF model file")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8099)
    p.add_argument("-c", "--ctx-size", type=int, default=2048, help="context size, shared by all slots")
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", type=int, default=99)
    p.add_argument("-np", "--parallel", type=int, default=1, help="number of slots")
    p.add_argument("-t", "--threads", type=int, default=-1, help="decode threads (-1: llama.cpp picks)")
    p.add_argument("-tb", "--threads-batch", type=int, default=None, help="prefill threads (default: --threads)")
    p.add_argument("-b", "--batch-size", type=int, default=None)
    p.add_argument("-ub", "--ubatch-size", type=int, default=None)
    p.add_argument("--metrics", action="store_true", help="serve /metrics")
    p.add_argument("--no-slots", action="store_true", help="do not serve /slots")
    p.add_argument("--api-key", default=None, help="require this key as a Bearer token (visible in `ps`: prefer LLAMA_API_KEY)")
    p.add_argument("--api-key-file", default=None, help="require the keys in this file, one per line")
    p.add_argument("-cram", "--cache-ram", type=int, default=None, help="prompt cache RAM in MiB")
    p.add_argument("--no-warmup", action="store_true")
    return p


def api_keys(args: argparse.Namespace, environ: dict[str, str] | None = None) -> list[str]:
    """The keys the server requires: --api-key, the lines of --api-key-file, or LLAMA_API_KEY."""
    environ = os.environ if environ is None else environ
    keys = [args.api_key] if args.api_key else []
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys and environ.get("LLAMA_API_KEY"):
        keys = [environ["LLAMA_API_KEY"]]
    return keys


def make_params(args: argparse.Namespace):
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_gpu_layers = args.n_gpu_layers
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads_batch if args.threads_batch is not None else args.threads
    if args.batch_size:
        params.n_batch = args.batch_size
    if args.ubatch_size:
        params.n_ubatch = args.ubatch_size
    params.endpoint_metrics = args.metrics
    params.endpoint_props = True
    params.endpoint_slots = not args.no_slots
    keys = api_keys(args)
    if keys:
        params.api_keys = keys
    if args.cache_ram is not None:
        params.cache_ram_mib = args.cache_ram
    if args.no_warmup:
        params.warmup = False
    return params


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import xllamacpp

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(make_params(args))  # starts serving in background threads
    print(f"bytesup.server: xllamacpp {xllamacpp.__version__} listening at {server.listening_address}", flush=True)
    stop.wait()
    print("bytesup.server: stopping", flush=True)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
