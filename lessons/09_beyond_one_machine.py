"""Lesson 9 — Beyond one machine: a model split across llama.cpp RPC servers

A model too large for one box is split by layers across machines: llama.cpp's rpc-server hosts some
of the layers on each node, and `llama-server --rpc host:port,…` drives them, one more device per
node. This script serves the default model whole (one process), then split across two rpc-servers
(on loopback, each with its own threads, unless --rpc names remote ones), and measures prefill and
decode of both. It reads from the server's log how many bytes of weights each node holds, counts
the bytes that cross the network per decoded token (the activations at each split, width × bytes ×
hops, and the logits coming back), and extends the capstone's bytes model with that network term:
the nodes work in turn, so one token takes the sum of each node's weight reads plus the round trips
between them. Prediction against measurement, then what it means for two real machines.

Its parts: the requests (serve the model whole, then split, and time both); the arithmetic (this file's computation
section: the speeds, each node's share, the network bytes and the prediction); what it records; the view, its
records, tables, notes and plot (`bytesup.store.views.lesson09`); and `main`, last, in the order of the lesson.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import contextlib
import statistics
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from bytesup.course.ceiling import Spread
from bytesup.errors import BytesupError
from bytesup.llama import rpc, topology
from bytesup.llama.shapes import ServerShape
from bytesup.llama.timed import decode_samples, long_prompt_tokens, prefill_samples, timed_completions
from bytesup.models import catalog
from bytesup.models.gguf import read_model_info
from bytesup.store.facts.lesson09 import (DecodeSpeeds, NetworkBytesPerToken, PredictedSplitDecode, PrefillSpeeds,
                                          SplitTopology, WeightsPerNode)
from bytesup.store.views import lesson09
from bytesup.store.views.lesson09 import NetworkBytes, NodeShare, Outcome, Prediction, Speeds
from bytesup.lesson import LessonContext, ModelQuery
from bytesup.options import LessonOptions
from bytesup.units import GB, MiB, PINNED

TITLE = "Beyond one machine: a model split across RPC servers"

PROMPT_TOKENS = 128  # prefill: one micro-batch of the carried text
N_PREDICT = 32
CTX = 512
MIN_SAMPLES = 1  # timed completions per setup: the run's --repeat, at least one (a median needs one)
NODES = 2  # loopback rpc-servers started when --rpc names none
ACTIVATION_BYTES = 4  # llama.cpp hands activations between devices as F32
# Per token and node, ggml's RPC client sends the input and the compute without waiting for an answer, then
# waits for the output it reads back: one round trip per node.
ROUND_TRIPS_PER_NODE = 1
LINK_GB_PER_S = 1.25  # the bytes term's link: 10 Gbit/s Ethernet (loopback is faster, so here an upper bound)


# --- requests: serve the model whole, then split, and time both ------------------------------------

@dataclass(frozen=True)
class ModelFacts:
    name: str
    path: str
    n_layer: int
    n_embd: int
    n_vocab: int
    tensor_bytes: int


@dataclass(frozen=True)
class Timed:
    """One setup's measured speeds (the server's own timings, every repeat kept) and where its weights were."""
    setup: str
    nodes: int
    threads: list[int]
    prefill: list[float]
    decode: list[float]
    topology: dict


def model_facts(ctx: LessonContext) -> ModelFacts:
    """The served model when its file is readable here, else the default model (fetched once); a host value."""
    def read() -> dict:
        path = ctx.readable_model() or catalog.ensure_model(catalog.DEFAULT_MODEL)
        info = read_model_info(path)
        hp = info["hyperparameters"]
        return {"name": path.stem, "path": str(path), "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
                "n_vocab": hp["n_vocab"], "tensor_bytes": info["tensor_bytes"]}

    return ModelFacts(**ctx.host("model", read))


def serve_and_time(ctx: LessonContext, setup: str, model: ModelFacts, threads: list[int], flags: list[str]) -> Timed:
    """A server of the lesson's own (the native build, so both setups run the same engine): where its
    layers went, then the run's samples of timed completions of PROMPT_TOKENS prompt tokens and N_PREDICT decoded."""
    rpc_flag = flags[flags.index("--rpc") + 1] if "--rpc" in flags else None
    shape = ServerShape(Path(model.path), slots=1, context=CTX, extra=(*rpc.TOPOLOGY_LOG, *flags), native=True)
    with ctx.local_server(setup, shape) as srv:
        where = ctx.host(f"topology_{setup}", lambda: rpc.server_log_topology(srv.base_url, rpc_flag))
        rpc.record_topology(ctx.shared, ctx.lesson_id, setup, where)  # the run's manifest shows the split
        prompt = long_prompt_tokens(srv, PROMPT_TOKENS)
        done = timed_completions(srv, prompt, N_PREDICT, ctx.samples(MIN_SAMPLES), track=lambda it: ctx.track(it, setup))
    return Timed(setup, max(1, len(topology.endpoints(rpc_flag))), threads, prefill_samples(done),
                 decode_samples(done), where)


class Options(LessonOptions):
    """This lesson's options (`ctx.options`): rpc-servers of your own to split the model across."""

    rpc: str | None = Field(
        default=None,
        description="host:port,… of rpc-servers to split the model across (default: two started on 127.0.0.1)",
        json_schema_extra={"hint": "give rpc-server endpoints as host:port separated by commas, "
                                   "e.g. --rpc 127.0.0.1:50052,127.0.0.1:50053"})

    @field_validator("rpc")
    @classmethod
    def _rpc_endpoints(cls, value: str | None) -> str | None:
        """Each comma-separated endpoint is host:port with a port from 1 to 65535."""
        if value is None:
            return None
        ends = [e.strip() for e in value.split(",") if e.strip()]
        for end in ends:
            host, _, port = end.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{end!r} is not host:port")
        if not ends:
            raise ValueError("no endpoint given")
        return ",".join(ends)


def measure_whole(ctx: LessonContext, model: ModelFacts, threads: int) -> Timed:
    ctx.step(f"serving {model.name} whole, {threads} threads")
    return serve_and_time(ctx, "whole", model, [threads], ["-t", str(threads)])


def measure_split(ctx: LessonContext, model: ModelFacts, node_threads: int) -> tuple[Timed, dict[str, float]]:
    """Split across rpc-servers: those named by --rpc, else NODES started on loopback (stopped on every way
    out). Each node's TCP connect time (one round trip) is read before llama-server connects."""
    given = topology.endpoints(ctx.options.rpc)
    with contextlib.ExitStack() as stack:
        def endpoints() -> list[str]:
            if given:
                return given
            started = stack.enter_context(rpc.loopback_rpc_servers([node_threads] * NODES))
            return [s.endpoint for s in started]

        ctx.step("starting rpc-servers on loopback" if not given else f"using rpc-servers {', '.join(given)}")
        nodes = ctx.host("rpc_endpoints", endpoints)
        connect = ctx.host("connect_seconds", lambda: rpc.median_connect_seconds(nodes))
        ctx.step(f"serving {model.name} split across {len(nodes)} rpc-servers")
        # -ngl 99: every layer on the rpc-servers; -t 1: the driving process only hands tensors over.
        timed = serve_and_time(ctx, "split", model, [node_threads] * len(nodes),
                               ["-t", "1", "-ngl", "99", "--rpc", ",".join(nodes)])
    return timed, connect


# --- computation: pure functions of the measured speeds and the topology -------------------------------

def speeds(t: Timed) -> Speeds:
    return Speeds(t.setup, t.nodes, t.threads, Spread.of(t.prefill), Spread.of(t.decode))


def node_shares(setup: str, where: dict) -> list[NodeShare]:
    devices = where.get("devices") or []
    total = sum(d["model_bytes"] for d in devices)
    return [NodeShare(setup, d["device"], d.get("endpoint"), d["model_bytes"], d["model_bytes"] / MiB,
                      100 * (d["model_bytes"] / total if total else 0.0), d.get("kv_bytes") or 0) for d in devices]


def network_bytes_per_token(width: int, n_vocab: int, nodes: int, bytes_per_value: int = ACTIVATION_BYTES) -> NetworkBytes:
    """The token's activation vector (width values) enters the first node, and at each split between two
    nodes it goes to the driving server and on to the next (ggml's RPC copies between two servers through
    the client): 1 + 2 × (nodes − 1) hops. The last node sends the logits back (n_vocab values)."""
    hops = 2 * nodes - 1 if nodes > 0 else 0
    activation = width * bytes_per_value * hops
    logits = n_vocab * bytes_per_value if nodes > 0 else 0
    return NetworkBytes(width, bytes_per_value, hops, activation, n_vocab, logits, activation + logits)


def predict_split(whole: Speeds, whole_bytes: int, node_bytes: list[int], node_threads: list[int],
                  round_trip_s: float, network: NetworkBytes, link_bytes_per_s: float) -> Prediction:
    """Nodes work in turn on each token: the sum of their weight reads, each at the rate this host's
    threads read in the whole setup, plus ROUND_TRIPS_PER_NODE round trips per node and the bytes on the link."""
    rate = whole_bytes * whole.decode.median / sum(whole.threads)
    node_s = [b / (rate * t) for b, t in zip(node_bytes, node_threads, strict=True)]
    trips = ROUND_TRIPS_PER_NODE * len(node_bytes)
    trips_s = trips * round_trip_s
    link_s = network.total_bytes / link_bytes_per_s
    total = sum(node_s) + trips_s + link_s
    return Prediction(rate, node_s, trips, trips_s, link_s, total, 1.0 / total, ROUND_TRIPS_PER_NODE, link_bytes_per_s)


def analyse(model: ModelFacts, whole: Timed, split: Timed, connect_s: dict[str, float]) -> Outcome:
    w, s = speeds(whole), speeds(split)
    shares = node_shares("whole", whole.topology) + node_shares("split", split.topology)
    nodes = [sh for sh in shares if sh.setup == "split" and sh.endpoint]
    if not nodes:
        raise BytesupError("The split server's log names no rpc-server holding weights (no 'RPCn[host:port] model "
                           "buffer size' line): was it started with --rpc and -ngl 99 on a build with RPC?")
    network = network_bytes_per_token(model.n_embd, model.n_vocab, len(nodes))
    prediction = predict_split(w, model.tensor_bytes, [n.model_bytes for n in nodes], split.threads[:len(nodes)],
                               statistics.median(connect_s.values()), network, LINK_GB_PER_S * GB)
    return Outcome(w, s, shares, network, connect_s, prediction)


# --- what the lesson records ------------------------------------------------------------------------------

def record(ctx: LessonContext, o: Outcome, timed: list[Timed]) -> None:
    """Measurements (their settings name the topology, so `bytesup compare` never sets one setup against
    another) and the facts `check` reads by name."""
    for t in timed:
        setting = {"setup": t.setup, "topology": topology.describe(t.topology), "threads": t.threads}
        ctx.measure("prefill_tokens_per_s", "tokens/s", t.prefill, higher_is_better=True, settings=setting,
                    description=f"prefill of {PROMPT_TOKENS} prompt tokens, from the server's timings")
        ctx.measure("decode_tokens_per_s", "tokens/s", t.decode, higher_is_better=True, settings=setting,
                    description=f"decode of {N_PREDICT} tokens, from the server's timings")
    ctx.fact(DecodeSpeeds(whole=o.whole.decode.median, split=o.split.decode.median))
    ctx.fact(PrefillSpeeds(whole=o.whole.prefill.median, split=o.split.prefill.median))
    ctx.fact(WeightsPerNode([sh.model_bytes for sh in o.shares if sh.setup == "split" and sh.endpoint]))
    ctx.fact(NetworkBytesPerToken(o.network.total_bytes))
    ctx.fact(PredictedSplitDecode(o.prediction.tokens_per_s))
    ctx.fact(SplitTopology(timed[-1].topology))


# --- the lesson -------------------------------------------------------------------------------------------

NO_RPC_ENGINE = ("Not measured: splitting a model across rpc-servers needs a native llama-server built with RPC, and the "
                 "embedded engine has none. Build it once with `bash scripts/build_llama_server.sh` (about 9 minutes on "
                 "2 cores; cached outside the clone), or set LLAMA_SERVER to a llama-server built with -DGGML_RPC=ON, "
                 "then run `bytesup run 09_beyond_one_machine`.")


def rpc_engine_available() -> bool:
    """Whether this host has a llama-server that can drive rpc-servers (a host fact, recorded)."""
    try:
        rpc.rpc_llama_server()
    except rpc.RpcUnavailable:
        return False
    return True


def main(ctx: LessonContext):
    model = model_facts(ctx)
    # The same threads per node in both setups (the server's threads shared among the nodes), so that the
    # split is the only difference: one process on T threads, then each rpc-server on T.
    threads = ctx.server_threads()
    node_threads = max(1, threads // NODES)
    samples = ctx.samples(MIN_SAMPLES)
    ctx.settings.update({"pinned": PINNED, "prompt_tokens": PROMPT_TOKENS, "n_predict": N_PREDICT, "ctx": CTX,
                         "repeat": samples, "model": model.name, "threads": threads, "node_threads": node_threads,
                         "rpc": ctx.options.rpc, "link_gb_per_s": LINK_GB_PER_S})

    # 1. The same engine for both setups: the native build (the embedded engine has no RPC).
    if not ctx.host("rpc_engine_available", rpc_engine_available):
        ctx.shows(lesson09.NOT_MEASURED)
        return ctx.skip(NO_RPC_ENGINE, "bash scripts/build_llama_server.sh && bytesup run 09_beyond_one_machine")
    whole = measure_whole(ctx, model, node_threads)
    split, connect = measure_split(ctx, model, node_threads)

    # 2. Speeds, the bytes per node, the network term and the prediction.
    outcome = analyse(model, whole, split, connect)
    ctx.tables += [*lesson09.setups(outcome, repeat=samples, prompt_tokens=PROMPT_TOKENS, n_predict=N_PREDICT),
                   lesson09.nodes(outcome), lesson09.network(outcome, model.name, model.tensor_bytes),
                   lesson09.prediction(outcome)]

    # 3. What it means for two real machines, and the picture.
    ctx.notes += lesson09.meaning(outcome)
    ctx.plots.append(lesson09.decode_by_setup(outcome))
    record(ctx, outcome, [whole, split])

    # What this run shows: the split against one process, and the bytes model's prediction, first with the plot.
    ctx.shows(lesson09.shows(outcome, model.name, model.tensor_bytes), plot="decode_by_setup")
    return ctx.finish()


def models_needed(query: ModelQuery) -> list[str]:
    """The models a live run makes before its first lesson for this one: the default model, where the served
    model's file is not readable here (model_facts' rule)."""
    return [] if query.served is not None else [catalog.DEFAULT_MODEL]


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
