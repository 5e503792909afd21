"""The embedded engine: llama.cpp's own HTTP server, run in-process through the xllamacpp wheel.

    python -m bytesup.llama.embedded -m MODEL.gguf --host 127.0.0.1 --port 8099 -c 2048 --metrics

It takes the llama-server flags the course uses and serves the same API (/health, /props,
/completion, /tokenize, /detokenize, /metrics, /slots, /v1/models) until SIGTERM or Ctrl-C.
`scripts/start_server.sh` runs it when no `llama-server` binary is found.

An API key is read, as llama-server reads it, from the LLAMA_API_KEY environment variable or from
--api-key-file (one key per line), so that it never shows in `ps`; --api-key still works.

Speculative decoding takes llama-server's own flags too:

    python -m bytesup.llama.embedded -m TARGET.gguf -md DRAFT.gguf --spec-type draft-simple --spec-draft-n-max 8
    python -m bytesup.llama.embedded -m TARGET.gguf --spec-type ngram-simple

As with llama-server, a draft model without --spec-type is loaded but never used.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Mapping


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bytesup.llama.embedded",
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
    spec = p.add_argument_group("speculative decoding (llama-server's flag names)")
    spec.add_argument("--spec-type", type=spec_types, default=None, metavar="TYPE[,TYPE…]",
                      help="none, draft-simple, ngram-simple, … (comma-separated; default none)")
    spec.add_argument("-md", "--spec-draft-model", "--model-draft", dest="spec_draft_model", default=None,
                      metavar="FNAME", help="draft model (used only with a draft-* --spec-type)")
    spec.add_argument("--spec-draft-n-max", type=int, default=None, help="tokens to draft per step at most")
    spec.add_argument("--spec-draft-n-min", type=int, default=None, help="tokens to draft per step at least")
    spec.add_argument("--spec-draft-p-min", "--draft-p-min", dest="spec_draft_p_min", type=float, default=None,
                      help="stop drafting below this draft probability (greedy)")
    spec.add_argument("--spec-draft-threads", "-td", "--threads-draft", dest="spec_draft_threads", type=int,
                      default=None, help="draft decode threads (default: --threads)")
    spec.add_argument("--spec-draft-threads-batch", "-tbd", "--threads-batch-draft", dest="spec_draft_threads_batch",
                      type=int, default=None, help="draft prefill threads (default: the draft's --spec-draft-threads)")
    spec.add_argument("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", dest="spec_draft_ngl",
                      type=int, default=None, help="draft layers to offload")
    spec.add_argument("--spec-ngram-simple-size-n", type=int, default=None, help="ngram-simple: lookup n-gram length")
    spec.add_argument("--spec-ngram-simple-size-m", type=int, default=None, help="ngram-simple: drafted m-gram length")
    spec.add_argument("--spec-ngram-simple-min-hits", type=int, default=None, help="ngram-simple: minimum hits")
    return p


def api_keys(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> list[str]:
    """The keys the server requires: --api-key, the lines of --api-key-file, or LLAMA_API_KEY."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    keys = [args.api_key] if args.api_key else []
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys and env.get("LLAMA_API_KEY"):
        keys = [env["LLAMA_API_KEY"]]
    return keys
# llama-server's --spec-type values; each is xllamacpp's COMMON_SPECULATIVE_TYPE_<NAME> (dashes as underscores).
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
              "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def spec_types(value: str) -> list[str]:
    """`--spec-type a,b` -> ['a', 'b'], each one llama-server knows."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in SPEC_TYPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown speculative type {', '.join(unknown) or value!r}; "
                                         f"one or more of {', '.join(SPEC_TYPES)}")
    return names


def spec_type_value(xllamacpp, name: str):
    """xllamacpp's enum member for a --spec-type name; a clear error where this wheel has none."""
    enum = getattr(xllamacpp, "common_speculative_type", None)
    member = getattr(enum, f"COMMON_SPECULATIVE_TYPE_{name.upper().replace('-', '_')}", None) if enum else None
    if member is None:
        raise SystemExit(f"bytesup.llama.embedded: xllamacpp {getattr(xllamacpp, '__version__', '?')} has no speculative "
                         f"type {name!r}: this engine cannot run --spec-type {name}.")
    return member


def apply_speculative(params, args: argparse.Namespace, xllamacpp) -> None:
    """The speculative flags onto params.speculative (xllamacpp's mirror of llama.cpp's common_params)."""
    spec = params.speculative
    if args.spec_type is not None:
        spec.types = [spec_type_value(xllamacpp, n) for n in args.spec_type]
    draft = spec.draft
    if args.spec_draft_model:
        draft.mparams.path = args.spec_draft_model
    if args.spec_draft_n_max is not None:
        draft.n_max = args.spec_draft_n_max
    if args.spec_draft_n_min is not None:
        draft.n_min = args.spec_draft_n_min
    if args.spec_draft_p_min is not None:
        draft.p_min = args.spec_draft_p_min
    # llama-server: the draft decodes with --threads unless told otherwise.
    threads = args.spec_draft_threads if args.spec_draft_threads is not None else args.threads
    draft.cpuparams.n_threads = threads
    draft.cpuparams_batch.n_threads = args.spec_draft_threads_batch if args.spec_draft_threads_batch is not None else threads
    if args.spec_draft_ngl is not None:
        draft.n_gpu_layers = args.spec_draft_ngl
    ngram = spec.ngram_simple
    for flag, attr in (("spec_ngram_simple_size_n", "size_n"), ("spec_ngram_simple_size_m", "size_m"),
                       ("spec_ngram_simple_min_hits", "min_hits")):
        if getattr(args, flag) is not None:
            setattr(ngram, attr, getattr(args, flag))


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
    apply_speculative(params, args, xllamacpp)
    return params


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import xllamacpp

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(make_params(args))  # starts serving in background threads
    print(f"bytesup.llama.embedded: xllamacpp {xllamacpp.__version__} listening at {server.listening_address}", flush=True)
    stop.wait()
    print("bytesup.llama.embedded: stopping", flush=True)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
