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

from bytesup.llama import timed as measure
from bytesup.models import catalog as models
from bytesup.llama import rpc
from bytesup.llama import topology
from bytesup.errors import BytesupError
from bytesup.models.gguf import read_model_info
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns
from bytesup.store.facts import lesson09 as stated
from bytesup.llama.placement import is_loopback
from bytesup.lesson import LessonContext
from bytesup.options import LessonOptions

TITLE = "Beyond one machine: a model split across RPC servers"

PROMPT_TOKENS = 128  # prefill: one micro-batch of the carried text
N_PREDICT = 32
CTX = 512
NODES = 2  # loopback rpc-servers started when --rpc names none
ACTIVATION_BYTES = 4  # llama.cpp hands activations between devices as F32
# Per token and node, ggml's RPC client sends the input and the compute without waiting for an answer, then
# waits for the output it reads back: one round trip per node.
ROUND_TRIPS_PER_NODE = 1
LINK_GB_PER_S = 1.25  # the bytes term's link: 10 Gbit/s Ethernet (loopback is faster, so here an upper bound)
GB = 1e9
MIB = 2**20


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
        path = ctx.readable_model() or models.ensure_model(models.DEFAULT_MODEL)
        info = read_model_info(path)
        hp = info["hyperparameters"]
        return {"name": path.stem, "path": str(path), "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
                "n_vocab": hp["n_vocab"], "tensor_bytes": info["tensor_bytes"]}

    return ModelFacts(**ctx.host("model", read))


def serve_and_time(ctx: LessonContext, setup: str, model: ModelFacts, threads: list[int], flags: list[str]) -> Timed:
    """A server of the lesson's own (the native build, so both setups run the same engine): where its
    layers went, then ctx.repeat timed completions of PROMPT_TOKENS prompt tokens and N_PREDICT decoded."""
    rpc_flag = flags[flags.index("--rpc") + 1] if "--rpc" in flags else None
    with ctx.local_server(setup, Path(model.path), ["-c", str(CTX), "--parallel", "1", *rpc.TOPOLOGY_LOG, *flags],
                          native=True) as srv:
        where = ctx.host(f"topology_{setup}", lambda: rpc.server_log_topology(srv.base_url, rpc_flag))
        rpc.record_topology(ctx.shared, ctx.lesson_id, setup, where)  # the run's manifest shows the split
        prompt = measure.long_prompt_tokens(srv, PROMPT_TOKENS)
        done = measure.timed_completions(srv, prompt, N_PREDICT, ctx.repeat, track=lambda it: ctx.track(it, setup))
    return Timed(setup, max(1, len(topology.endpoints(rpc_flag))), threads, measure.prefill_samples(done),
                 measure.decode_samples(done), where)


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

@dataclass(frozen=True)
class Speeds:
    setup: str
    nodes: int
    threads: list[int]
    prefill_median: float
    prefill_min: float
    prefill_max: float
    decode_median: float
    decode_min: float
    decode_max: float


def speeds(t: Timed) -> Speeds:
    return Speeds(t.setup, t.nodes, t.threads, statistics.median(t.prefill), min(t.prefill), max(t.prefill),
                  statistics.median(t.decode), min(t.decode), max(t.decode))


@dataclass(frozen=True)
class NodeShare:
    setup: str
    device: str
    endpoint: str | None
    model_bytes: int
    kv_bytes: int
    share: float  # of all the weights this server placed


def node_shares(setup: str, where: dict) -> list[NodeShare]:
    devices = where.get("devices") or []
    total = sum(d["model_bytes"] for d in devices)
    return [NodeShare(setup, d["device"], d.get("endpoint"), d["model_bytes"], d.get("kv_bytes") or 0,
                      d["model_bytes"] / total if total else 0.0) for d in devices]


@dataclass(frozen=True)
class NetworkBytes:
    """What crosses the network per decoded token."""
    width: int
    bytes_per_value: int
    hops: int
    activation_bytes: int
    n_vocab: int
    logits_bytes: int
    total_bytes: int


def network_bytes_per_token(width: int, n_vocab: int, nodes: int, bytes_per_value: int = ACTIVATION_BYTES) -> NetworkBytes:
    """The token's activation vector (width values) enters the first node, and at each split between two
    nodes it goes to the driving server and on to the next (ggml's RPC copies between two servers through
    the client): 1 + 2 × (nodes − 1) hops. The last node sends the logits back (n_vocab values)."""
    hops = 2 * nodes - 1 if nodes > 0 else 0
    activation = width * bytes_per_value * hops
    logits = n_vocab * bytes_per_value if nodes > 0 else 0
    return NetworkBytes(width, bytes_per_value, hops, activation, n_vocab, logits, activation + logits)


@dataclass(frozen=True)
class Prediction:
    """The capstone's bytes model, extended with the network: seconds per decoded token."""
    bytes_per_thread_per_s: float  # measured on the whole setup: its bytes per token × tokens/s ÷ threads
    node_seconds: list[float]  # each node's weight bytes ÷ (that rate × its threads)
    round_trips: int
    round_trip_seconds: float  # round trips × the median connect time
    link_seconds: float  # network bytes ÷ the link's rate
    seconds_per_token: float
    tokens_per_s: float


def predict_split(whole: Speeds, whole_bytes: int, node_bytes: list[int], node_threads: list[int],
                  round_trip_s: float, network: NetworkBytes, link_bytes_per_s: float) -> Prediction:
    """Nodes work in turn on each token: the sum of their weight reads, each at the rate this host's
    threads read in the whole setup, plus ROUND_TRIPS_PER_NODE round trips per node and the bytes on the link."""
    rate = whole_bytes * whole.decode_median / sum(whole.threads)
    node_s = [b / (rate * t) for b, t in zip(node_bytes, node_threads, strict=True)]
    trips = ROUND_TRIPS_PER_NODE * len(node_bytes)
    trips_s = trips * round_trip_s
    link_s = network.total_bytes / link_bytes_per_s
    total = sum(node_s) + trips_s + link_s
    return Prediction(rate, node_s, trips, trips_s, link_s, total, 1.0 / total)


@dataclass(frozen=True)
class Outcome:
    whole: Speeds
    split: Speeds
    shares: list[NodeShare]
    network: NetworkBytes
    connect_s: dict[str, float]
    prediction: Prediction

    @property
    def on_loopback(self) -> bool:
        """Every rpc-server of the split is on this machine (127.0.0.1, ::1, localhost)."""
        return all(is_loopback(endpoint.rpartition(":")[0].strip("[]")) for endpoint in self.connect_s)

    @property
    def decode_ratio(self) -> float:
        return self.split.decode_median / self.whole.decode_median

    @property
    def prediction_error(self) -> float:
        return self.prediction.tokens_per_s / self.split.decode_median - 1


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


@dataclass(frozen=True)
class SetupRow:
    setup: str = column("setup")
    nodes: int = column("nodes")
    threads: str = column("threads per node")
    prefill: float = column("prefill", "tokens/s")
    prefill_min: float = column("prefill min", "tokens/s")
    prefill_max: float = column("prefill max", "tokens/s")
    decode: float = column("decode", "tokens/s")
    decode_min: float = column("decode min", "tokens/s")
    decode_max: float = column("decode max", "tokens/s")
    vs_whole: float = column("decode ÷ whole", "×")


def setup_row(sp: Speeds, whole: Speeds) -> SetupRow:
    return SetupRow(sp.setup, sp.nodes, ", ".join(map(str, sp.threads)), sp.prefill_median, sp.prefill_min, sp.prefill_max,
                    sp.decode_median, sp.decode_min, sp.decode_max, sp.decode_median / whole.decode_median)


@dataclass(frozen=True)
class NodeRow:
    setup: str = column("setup")
    device: str = column("device")
    endpoint: str | None = column("endpoint")
    model_bytes: int = column("weights", "bytes")
    model_mib: float = column("weights", "MiB")
    share_percent: float = column("share of the weights", "%")
    kv_bytes: int = column("KV cache", "bytes")


def node_row(sh: NodeShare) -> NodeRow:
    return NodeRow(sh.setup, sh.device, sh.endpoint, sh.model_bytes, sh.model_bytes / MIB, 100 * sh.share, sh.kv_bytes)


@dataclass(frozen=True)
class NetworkRow:
    quantity: str = column("quantity")
    values: int | None = column("values")
    bytes: int = column("bytes", "bytes")


def network_rows(n: NetworkBytes, model: ModelFacts) -> list[NetworkRow]:
    """The bytes per decoded token on the network, and the weights' bytes beside them."""
    return [NetworkRow(f"activations: width {n.width} × {n.bytes_per_value} bytes × {n.hops} hops", n.width * n.hops,
                       n.activation_bytes),
            NetworkRow(f"logits back from the last node: {n.n_vocab:,} × {n.bytes_per_value} bytes", n.n_vocab, n.logits_bytes),
            NetworkRow("total", None, n.total_bytes),
            NetworkRow(f"for comparison: the weights the nodes read ({model.name})", None, model.tensor_bytes)]


@dataclass(frozen=True)
class TermRow:
    term: str = column("term")
    ms: float | None = column("time per token", "ms")
    tokens_per_s: float | None = column("decode", "tokens/s")


def prediction_rows(o: Outcome) -> list[TermRow]:
    """Each term of the predicted time per token, their sum, the measured decode, and the prediction's error."""
    p = o.prediction
    rows = [TermRow(f"node {i + 1} reads its weights", 1e3 * s, None) for i, s in enumerate(p.node_seconds)]
    return rows + [TermRow(f"{p.round_trips} round trips ({ROUND_TRIPS_PER_NODE} per node)", 1e3 * p.round_trip_seconds, None),
                   TermRow(f"{o.network.total_bytes:,} bytes at {LINK_GB_PER_S:g} GB/s", 1e3 * p.link_seconds, None),
                   TermRow("predicted: one token", 1e3 * p.seconds_per_token, p.tokens_per_s),
                   TermRow("measured (median)", 1e3 / o.split.decode_median, o.split.decode_median),
                   TermRow("predicted ÷ measured − 1", None, 100 * o.prediction_error)]


# --- rendering ------------------------------------------------------------------------------------------

def split_verdict(ratio: float) -> str:
    """What the ratio of split to whole decode says, judged within ±10%."""
    if ratio < 0.9:
        return ("slower. The nodes take turns on each token, so together they read the weights no faster than one "
                "process, and every token also waits on the hand-overs between them.")
    if ratio > 1.1:
        return ("faster, which the split alone cannot do (the nodes take turns): the two setups did not get the same "
                "CPU here (other load on the host), so this comparison carries that noise.")
    return ("about as fast. The nodes take turns on each token, so the split reads the same bytes per token as one "
            "process and adds only the hand-overs.")


def show_setups(ctx: LessonContext, o: Outcome) -> None:
    ctx.table("setups", f"One process against {o.split.nodes} rpc-servers: prefill and decode",
              columns(SetupRow), cells([setup_row(sp, o.whole) for sp in (o.whole, o.split)]),
              notes=[(f"{ctx.repeat} timed completions per setup: {PROMPT_TOKENS} prompt tokens, {N_PREDICT} decoded; speeds "
                     "from the server's own timings, min and max the extreme samples."),
                     f"Split, decode ran {o.decode_ratio:.2f} × as fast as whole: " + split_verdict(o.decode_ratio)])


def show_nodes(ctx: LessonContext, o: Outcome) -> None:
    ctx.table("nodes", "Bytes of weights per node (from the server's log)",
              columns(NodeRow), cells([node_row(sh) for sh in o.shares]),
              notes=[("llama-server prints each device's model buffer in MiB with two decimals while it loads; the bytes "
                     "are those figures × 2^20, exact to about 5 kB. The driving server keeps the token embeddings "
                     "(one row is read per token) on its own CPU.")])


def show_network(ctx: LessonContext, o: Outcome, model: ModelFacts) -> None:
    n = o.network
    trips = ", ".join(f"{e} {1e6 * s:.0f} µs" for e, s in o.connect_s.items())
    ctx.table("network", "What crosses the network per decoded token",
              columns(NetworkRow), cells(network_rows(n, model)),
              notes=[(f"Hops: the activations enter the first node, and at each of the {len(o.connect_s) - 1} split(s) go back "
                     "to the driving server and on to the next node (ggml's RPC copies between two rpc-servers through "
                     f"its client): 1 + 2 × (nodes − 1) = {n.hops}. Small inputs (positions, the attention mask) are left out."),
                     (f"{n.total_bytes:,} bytes per token against {model.tensor_bytes:,} bytes of weights: "
                     f"{model.tensor_bytes / n.total_bytes:,.0f} × fewer. The network carries little; what costs is "
                     f"waiting for it. TCP connect time (one round trip) to each node: {trips}.")])


def show_prediction(ctx: LessonContext, o: Outcome) -> None:
    p = o.prediction
    ctx.table("prediction", "The bytes model with a network term, against the split's measured decode",
              columns(TermRow), cells(prediction_rows(o)),
              notes=[(f"Rate per thread: the whole setup read {p.bytes_per_thread_per_s / GB:.3g} GB/s per thread (its bytes "
                     f"per token × {o.whole.decode_median:.3g} tokens/s ÷ {sum(o.whole.threads)} threads); each node reads "
                     "its share at that rate × its threads. The nodes work in turn, so their times add up."),
                     (f"Round trips: one per node (the input and the compute are sent without waiting; reading the output back "
                      f"waits), each at the median TCP connect time; "
                     f"{LINK_GB_PER_S:g} GB/s is 10 Gbit/s Ethernet"
                     + (", slower than loopback, so that term is an upper bound here." if o.on_loopback else
                        "; the link between these nodes was not measured.")),
                     (f"Predicted {p.tokens_per_s:.3g} tokens/s, measured {o.split.decode_median:.3g} "
                     f"({100 * o.prediction_error:+.0f}%): what the model leaves out (the graph, sent to a node when it "
                     "changes, the small inputs, the nodes' own scheduling) is in that gap.")])


def show_meaning(ctx: LessonContext, o: Outcome) -> None:
    p = o.prediction
    ctx.note("Two real machines: each node's decode stays bound by its own memory, reading only its share of the "
             "weights, so a model that fits in neither memory alone runs at about the speed one machine with both "
             "memories would give; the split buys capacity, not speed, because the nodes take turns.")
    ctx.note(f"Per-token latency adds a network round trip per hand-over: here {p.round_trips} × "
             f"{1e6 * p.round_trip_seconds / max(1, p.round_trips):.0f} µs "
             + ("on loopback; between machines each round trip is longer, " if o.on_loopback else "to these nodes; ")
             + f"and every split adds more. The bytes themselves ({o.network.total_bytes:,} per "
             "token) barely matter: decode is latency-bound on the network, not bandwidth-bound.")
    ctx.note("Prefill moves a whole batch of activations per hand-over and amortises the round trips over it, so it "
             "loses less to the split than decode does.")


def show_plot(ctx: LessonContext, o: Outcome) -> None:
    x = [1.0, float(o.split.nodes)]
    ctx.plot("decode_by_setup", "Decode tokens/s: one process, then split across rpc-servers", "nodes", "decode tokens/s",
             [Series(label="measured (median, min–max)", x=x, y=[o.whole.decode_median, o.split.decode_median],
                     y_min=[o.whole.decode_min, o.split.decode_min], y_max=[o.whole.decode_max, o.split.decode_max],
                     style="points"),
              Series(label="bytes model + network term", x=[float(o.split.nodes)], y=[o.prediction.tokens_per_s],
                     style="points")])


def record(ctx: LessonContext, o: Outcome, timed: list[Timed]) -> None:
    """Measurements (their settings name the topology, so `bytesup compare` never sets one setup against
    another) and the facts `check` reads by name."""
    for t in timed:
        setting = {"setup": t.setup, "topology": topology.describe(t.topology), "threads": t.threads}
        ctx.measure("prefill_tokens_per_s", "tokens/s", t.prefill, higher_is_better=True, settings=setting,
                    description=f"prefill of {PROMPT_TOKENS} prompt tokens, from the server's timings")
        ctx.measure("decode_tokens_per_s", "tokens/s", t.decode, higher_is_better=True, settings=setting,
                    description=f"decode of {N_PREDICT} tokens, from the server's timings")
    ctx.fact(stated.DecodeSpeeds(whole=o.whole.decode_median, split=o.split.decode_median))
    ctx.fact(stated.PrefillSpeeds(whole=o.whole.prefill_median, split=o.split.prefill_median))
    ctx.fact(stated.WeightsPerNode([sh.model_bytes for sh in o.shares if sh.setup == "split" and sh.endpoint]))
    ctx.fact(stated.NetworkBytesPerToken(o.network.total_bytes))
    ctx.fact(stated.PredictedSplitDecode(o.prediction.tokens_per_s))
    ctx.fact(stated.SplitTopology(timed[-1].topology))


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
    ctx.settings.update({"pinned": measure.PINNED, "prompt_tokens": PROMPT_TOKENS, "n_predict": N_PREDICT, "ctx": CTX,
                         "repeat": ctx.repeat, "model": model.name, "threads": threads, "node_threads": node_threads,
                         "rpc": ctx.options.rpc, "link_gb_per_s": LINK_GB_PER_S})

    # 1. The same engine for both setups: the native build (the embedded engine has no RPC).
    if not ctx.host("rpc_engine_available", rpc_engine_available):
        return ctx.skip(NO_RPC_ENGINE, "bash scripts/build_llama_server.sh && bytesup run 09_beyond_one_machine")
    whole = measure_whole(ctx, model, node_threads)
    split, connect = measure_split(ctx, model, node_threads)

    # 2. Speeds, the bytes per node, the network term and the prediction.
    outcome = analyse(model, whole, split, connect)
    show_setups(ctx, outcome)
    show_nodes(ctx, outcome)
    show_network(ctx, outcome, model)
    show_prediction(ctx, outcome)

    # 3. What it means for two real machines, and the picture.
    show_meaning(ctx, outcome)
    show_plot(ctx, outcome)
    record(ctx, outcome, [whole, split])
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
