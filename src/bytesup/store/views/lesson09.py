"""Lesson 9's view: the records of a model served whole and split across rpc-servers (the speeds, each node's
weights, the bytes on the network, the bytes model's prediction), and the tables, notes and plot that show them.
Each table is built from the records by their declared columns (`store.rows.column`); nothing here starts a server
or times a request."""

from __future__ import annotations

from dataclasses import dataclass

from bytesup.course.ceiling import Spread
from bytesup.llama.placement import is_loopback
from bytesup.store.results import Column, Plot, Series, Table
from bytesup.store.rows import cells, column, columns, spread
from bytesup.store.views import pick, table
from bytesup.units import GB


# --- the records ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Speeds:
    """One setup's prefill and decode speeds over its repeats, tokens/s."""
    setup: str
    nodes: int
    threads: list[int]
    prefill: Spread
    decode: Spread


@dataclass(frozen=True)
class NodeShare:
    """One device's weights as the server's log gave them, and its share of all the weights that server placed."""
    setup: str = column("setup")
    device: str = column("device")
    endpoint: str | None = column("endpoint")
    model_bytes: int = column("weights", "bytes")
    model_mib: float = column("weights", "MiB")
    share_percent: float = column("share of the weights", "%")
    kv_bytes: int = column("KV cache", "bytes")


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
    round_trips_per_node: int  # what the model assumes of ggml's RPC client
    link_bytes_per_s: float    # the link it assumes


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
        return self.split.decode.median / self.whole.decode.median

    @property
    def prediction_error(self) -> float:
        return self.prediction.tokens_per_s / self.split.decode.median - 1



# --- the rows of the tables ------------------------------------------------------------------------

@dataclass(frozen=True)
class SetupRow:
    setup: str = column("setup")
    nodes: int = column("nodes")
    threads: str = column("threads per node")
    prefill: Spread = spread("prefill", "prefill min", "prefill max", "tokens/s")
    decode: Spread = spread("decode", "decode min", "decode max", "tokens/s")
    vs_whole: float = column("decode ÷ whole", "×")


def setup_row(sp: Speeds, whole: Speeds) -> SetupRow:
    return SetupRow(sp.setup, sp.nodes, ", ".join(map(str, sp.threads)), sp.prefill, sp.decode,
                    sp.decode.median / whole.decode.median)


@dataclass(frozen=True)
class NetworkRow:
    quantity: str = column("quantity")
    values: int | None = column("values")
    bytes: int = column("bytes", "bytes")


def network_rows(n: NetworkBytes, model_name: str, tensor_bytes: int) -> list[NetworkRow]:
    """The bytes per decoded token on the network, and the weights' bytes beside them."""
    return [NetworkRow(f"activations: width {n.width} × {n.bytes_per_value} bytes × {n.hops} hops", n.width * n.hops,
                       n.activation_bytes),
            NetworkRow(f"logits back from the last node: {n.n_vocab:,} × {n.bytes_per_value} bytes", n.n_vocab, n.logits_bytes),
            NetworkRow("total", None, n.total_bytes),
            NetworkRow(f"for comparison: the weights the nodes read ({model_name})", None, tensor_bytes)]


@dataclass(frozen=True)
class TermRow:
    term: str = column("term")
    ms: float | None = column("time per token", "ms")
    tokens_per_s: float | None = column("decode", "tokens/s")


def prediction_rows(o: Outcome) -> list[TermRow]:
    """Each term of the predicted time per token, their sum, the measured decode, and the prediction's error."""
    p = o.prediction
    rows = [TermRow(f"node {i + 1} reads its weights", 1e3 * s, None) for i, s in enumerate(p.node_seconds)]
    return rows + [TermRow(f"{p.round_trips} round trips ({p.round_trips_per_node} per node)", 1e3 * p.round_trip_seconds, None),
                   TermRow(f"{o.network.total_bytes:,} bytes at {p.link_bytes_per_s / GB:g} GB/s", 1e3 * p.link_seconds, None),
                   TermRow("predicted: one token", 1e3 * p.seconds_per_token, p.tokens_per_s),
                   TermRow("measured (median)", 1e3 / o.split.decode.median, o.split.decode.median),
                   TermRow("predicted ÷ measured − 1", None, 100 * o.prediction_error)]


# --- tables, notes and the plot ---------------------------------------------------------------------

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


SETUP_SHOWN = ["setup", "nodes", "threads per node", "prefill", "decode", "decode ÷ whole"]


def setups(o: Outcome, *, repeat: int, prompt_tokens: int, n_predict: int) -> list[Table]:
    """The medians in the main text; every column, with each speed's lowest and highest sample, under Details."""
    rows = [setup_row(sp, o.whole) for sp in (o.whole, o.split)]
    full = table("setups", f"One process against {o.split.nodes} rpc-servers, every column", SetupRow, rows,
                 [f"{repeat} timed completions per setup; min and max are the extreme samples."])
    full.detail = True
    cols, shown_rows = pick(columns(SetupRow), cells(rows), SETUP_SHOWN)
    main = Table(name="setups_main", title=f"One process against {o.split.nodes} rpc-servers: prefill and decode",
                 columns=[Column(name=n, unit=u) for n, u in cols], rows=shown_rows, notes=[
                     (f"{repeat} timed completions per setup: {prompt_tokens} prompt tokens, {n_predict} decoded; speeds "
                      "from the server's own timings, medians (the extreme samples are under Details)."),
                     f"Split, decode ran {o.decode_ratio:.2f} × as fast as whole: " + split_verdict(o.decode_ratio)])
    return [main, full]


def shows(o: Outcome, model_name: str, tensor_bytes: int) -> str:
    """What the run shows: the split's decode against one process's, in the words of `split_verdict`, and the bytes
    model with its network term against the split's measured decode."""
    verdict = split_verdict(o.decode_ratio).split(". ")[0].rstrip(".")
    text = (f"Split across {o.split.nodes} rpc-servers, {model_name} decoded {o.split.decode.median:.3g} tokens/s against "
            f"{o.whole.decode.median:.3g} in one process ({o.decode_ratio:.2f}×): {verdict}.")
    text += (f" The bytes model with a network term predicted {o.prediction.tokens_per_s:.3g} tokens/s "
             f"({100 * o.prediction_error:+.0f}%), and the {o.network.total_bytes:,} bytes a token sends over the "
             f"network are {tensor_bytes / o.network.total_bytes:,.0f}× fewer than the {tensor_bytes:,} bytes of weights "
             "it reads" + (": the split buys room for a larger model, not speed." if o.decode_ratio <= 1.1 else "."))
    return text


NOT_MEASURED = ("This run measured nothing for this lesson: splitting a model across rpc-servers needs a native "
                "llama-server built with RPC, and the engine here has none (the note below says how to build one).")


def nodes(o: Outcome) -> Table:
    return table("nodes", "Bytes of weights per node (from the server's log)", NodeShare, o.shares,
                 [("llama-server prints each device's model buffer in MiB with two decimals while it loads; the bytes "
                   "are those figures × 2^20, exact to about 5 kB. The driving server keeps the token embeddings "
                   "(one row is read per token) on its own CPU.")])


def network(o: Outcome, model_name: str, tensor_bytes: int) -> Table:
    n = o.network
    trips = ", ".join(f"{e} {1e6 * s:.0f} µs" for e, s in o.connect_s.items())
    return table("network", "What crosses the network per decoded token", NetworkRow, network_rows(n, model_name, tensor_bytes),
                 [(f"Hops: the activations enter the first node, and at each of the {len(o.connect_s) - 1} split(s) go back "
                   "to the driving server and on to the next node (ggml's RPC copies between two rpc-servers through "
                   f"its client): 1 + 2 × (nodes − 1) = {n.hops}. Small inputs (positions, the attention mask) are left out."),
                  (f"{n.total_bytes:,} bytes per token against {tensor_bytes:,} bytes of weights: "
                   f"{tensor_bytes / n.total_bytes:,.0f} × fewer. The network carries little; what costs is "
                   f"waiting for it. TCP connect time (one round trip) to each node: {trips}.")])


def prediction(o: Outcome) -> Table:
    p = o.prediction
    return table("prediction", "The bytes model with a network term, against the split's measured decode",
                 TermRow, prediction_rows(o),
                 [(f"Rate per thread: the whole setup read {p.bytes_per_thread_per_s / GB:.3g} GB/s per thread (its bytes "
                   f"per token × {o.whole.decode.median:.3g} tokens/s ÷ {sum(o.whole.threads)} threads); each node reads "
                   "its share at that rate × its threads. The nodes work in turn, so their times add up."),
                  (f"Round trips: one per node (the input and the compute are sent without waiting; reading the output back "
                   f"waits), each at the median TCP connect time; "
                   f"{p.link_bytes_per_s / GB:g} GB/s is 10 Gbit/s Ethernet"
                   + (", slower than loopback, so that term is an upper bound here." if o.on_loopback else
                      "; the link between these nodes was not measured.")),
                  (f"Predicted {p.tokens_per_s:.3g} tokens/s, measured {o.split.decode.median:.3g} "
                   f"({100 * o.prediction_error:+.0f}%): what the model leaves out (the graph, sent to a node when it "
                   "changes, the small inputs, the nodes' own scheduling) is in that gap.")])


def meaning(o: Outcome) -> list[str]:
    """The lesson's notes: what the split means for two real machines."""
    p = o.prediction
    return [
        ("Two real machines: each node's decode stays bound by its own memory, reading only its share of the "
         "weights, so a model that fits in neither memory alone runs at about the speed one machine with both "
         "memories would give; the split buys capacity, not speed, because the nodes take turns."),
        (f"Per-token latency adds a network round trip per hand-over: here {p.round_trips} × "
         f"{1e6 * p.round_trip_seconds / max(1, p.round_trips):.0f} µs "
         + ("on loopback; between machines each round trip is longer, " if o.on_loopback else "to these nodes; ")
         + f"and every split adds more. The bytes themselves ({o.network.total_bytes:,} per "
         "token) barely matter: decode is latency-bound on the network, not bandwidth-bound."),
        ("Prefill moves a whole batch of activations per hand-over and amortises the round trips over it, so it "
         "loses less to the split than decode does."),
    ]


def decode_by_setup(o: Outcome) -> Plot:
    x = [1.0, float(o.split.nodes)]
    return Plot(name="decode_by_setup", title="Decode tokens/s: one process, then split across rpc-servers",
                x_label="nodes", y_label="decode tokens/s", series=[
                    Series(label="measured (median, min–max)", x=x, y=[o.whole.decode.median, o.split.decode.median],
                           y_min=[o.whole.decode.min, o.split.decode.min], y_max=[o.whole.decode.max, o.split.decode.max],
                           style="points"),
                    Series(label="bytes model + network term", x=[float(o.split.nodes)], y=[o.prediction.tokens_per_s],
                           style="points")])
