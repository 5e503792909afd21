"""Lesson 1 — What a model is on disk

A GGUF file is a header (the architecture and its hyperparameters, the tokenizer) followed by
tensors: named, shaped arrays of numbers in some storage type. This script reads the header of the
served model without loading any weights, lists every tensor, counts the parameters, adds up the
bytes by storage type and the parameters by part of the network (embedding, attention,
feed-forward, norms, output), and computes the work of one decoded token: every weight is read once, about two
floating-point operations are done per weight. Dividing a memory bandwidth by the bytes read per
token gives the bandwidth ceiling, the most tokens per second decode can reach. The bandwidth is
measured on this host (its main memory, read by as many threads as the server decodes with),
which bounds the server only when it decodes on this host's CPU; the server's own bandwidth can
be given with --bandwidth-gbs; the course's published example is shown beside them.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup.course import ceiling
from bytesup.course import formulas
from bytesup.host import hostbench
from bytesup.course import published
from bytesup.course.ceiling import Ceiling, TokenWork, token_work
from bytesup.models.gguf import read_model_info
from bytesup.lesson import LessonContext
from bytesup.options import BandwidthGbs, LessonOptions
from bytesup.store.rows import cells, column, columns

TITLE = "What a model is on disk"

GB = formulas.GB
MiB = 2**20

# Published reference values come from bytesup.course.published (the course outline); they are only
# ever shown labelled "published".
SPECIMEN: dict[str, Any] = published.SPECIMEN
PUBLISHED_MODEL = f"{published.SPECIMEN_NAME} (published)"
PUBLISHED_HOST = f"{published.SPARK_NAME} (published)"
PUBLISHED_CEILING: float = published.LESSON4["ceiling_tokens_per_s"]

GROUPS = ("embedding", "attention", "feed_forward", "norms", "output", "other")
NOT_IN_FILE = "not in the file"


# --- requests: the model file, the server's meta, the run's bandwidth ----------------------------

def read_header(ctx: LessonContext) -> dict[str, Any]:
    """The served model's GGUF header and tensor index (gguf_read.read_model_info), a host value:
    read before anything else, so a bad file fails before any request."""
    return ctx.host("model_info", lambda: read_model_info(ctx.require_model()))


class Options(LessonOptions):
    """This lesson's options (`ctx.options`): a bandwidth of your own for the decode ceiling."""

    bandwidth_gbs: BandwidthGbs = None


@dataclass(frozen=True)
class BandwidthInputs:
    """The run's bandwidth reading, where the server decodes, and the bandwidth given with --bandwidth-gbs."""

    reading: dict[str, Any]      # hostbench's reading: gb_per_s {samples, median, min, max}, threads, method…
    facts: dict[str, Any]        # the lesson's server facts: host_bandwidth_applies, reason
    given_gbs: float | None


def bandwidth_inputs(ctx: LessonContext) -> BandwidthInputs:
    facts = ctx.server_facts()
    reading = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 6, 7 and 8
    return BandwidthInputs(reading, facts, ctx.options.bandwidth_gbs)


# --- computation: from the header to named records ---------------------------------------------

def number(value: Any) -> int | float | None:
    """A hyperparameter as one number, or None when it is missing or not a single number
    (some architectures store a per-layer list)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def shown(value: Any) -> Any:
    """A hyperparameter for a table cell or a note: the number, a per-layer range, or "not in the file"."""
    if value is None:
        return NOT_IN_FILE
    if isinstance(value, list):
        nums = [v for v in value if number(v) is not None]
        if nums and len(nums) == len(value):
            low, high = min(nums), max(nums)
            return f"per layer: {low:,}" if low == high else f"per layer: {low:,}–{high:,}"
        return f"a list of {len(value)} values"
    return value


def shape_text(shape: list[int]) -> str:
    """'256 × 4096': llama.cpp's order, the row length first."""
    return " × ".join(str(n) for n in shape)


@dataclass(frozen=True)
class TensorEntry:
    name: str = column("name")
    shape: str = column("shape", "elements")   # llama.cpp's order, row length first
    type: str = column("type")
    elements: int = column("elements")
    bytes: int = column("bytes")


def tensor_entries(info: dict) -> list[TensorEntry]:
    """Every tensor, in file order."""
    return [TensorEntry(t["name"], shape_text(t["shape"]), t["type"], t["n_elements"], t["n_bytes"]) for t in info["tensors"]]


@dataclass(frozen=True)
class TypeShare:
    """One storage type: its tensors, parameters and bytes, and its block layout."""

    type: str = column("type")
    tensors: int = column("tensors")
    params: int = column("parameters")
    bytes: int = column("bytes")
    bits_per_param: float = column("bits per parameter")
    block_elements: int = column("block", "elements")
    block_bytes: int = column("block", "bytes")
    share_percent: float = column("share of bytes", "%")   # of all tensor bytes


def type_shares(info: dict) -> list[TypeShare]:
    """Per storage type (read_model_info's bytes_by_type and params_by_type)."""
    counts = Counter(t["type"] for t in info["tensors"])
    total = info["tensor_bytes"]
    shares = []
    for name, nbytes in info["bytes_by_type"].items():
        params = info["params_by_type"][name]
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
        shares.append(TypeShare(name, counts[name], params, nbytes, 8 * nbytes / params, block, block_bytes, 100 * nbytes / total))
    return shares


@dataclass(frozen=True)
class GroupShare:
    """One part of the network: its parameters, tensors and bytes, and their shares of the whole."""

    part: str = column("part")   # "feed-forward", not "feed_forward"
    params: int = column("parameters")
    params_percent: float = column("share of parameters", "%")
    tensors: int = column("tensors")
    bytes: int = column("bytes", "bytes")
    bytes_percent: float = column("share of bytes", "%")


def group_shares(info: dict) -> list[GroupShare]:
    """Per part of the network (read_model_info's *_by_group). "other" is listed only when some tensor falls into it."""
    n_params, n_bytes = info["n_params"], info["tensor_bytes"]
    params, nbytes, counts = info["params_by_group"], info["bytes_by_group"], info["tensors_by_group"]
    return [
        GroupShare(g.replace("_", "-"), params.get(g, 0), 100 * params.get(g, 0) / n_params,
                   counts.get(g, 0), nbytes.get(g, 0), 100 * nbytes.get(g, 0) / n_bytes)
        for g in GROUPS
        if params.get(g, 0) or g != "other"
    ]


def block_counts(info: dict) -> dict[int, int]:
    """Tensors per block, from the names blk.N.*."""
    counts: Counter[int] = Counter()
    for t in info["tensors"]:
        parts = t["name"].split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            counts[int(parts[1])] += 1
    return dict(sorted(counts.items()))


def token_embd(info: dict) -> dict | None:
    """The token_embd.weight entry of the tensor list, when it is a 2-D matrix."""
    t = next((t for t in info["tensors"] if t["name"] == "token_embd.weight"), None)
    return t if t is not None and len(t["shape"]) == 2 else None


def embedding_row_bytes(info: dict) -> int | None:
    """Bytes of one row of token_embd: its bytes ÷ its own row count (shape is [n_embd, n_rows],
    and n_rows may exceed the vocabulary when the table is padded)."""
    t = token_embd(info)
    return t["n_bytes"] // t["shape"][1] if t and t["shape"][1] else None


@dataclass(frozen=True)
class Totals:
    n_params: int
    tensor_bytes: int     # the bytes decode reads per token: every weight once
    file_bytes: int
    overhead_bytes: int   # header (metadata, tokenizer, tensor index) and alignment padding
    bits_per_param: float


def totals(info: dict) -> Totals:
    n_params, tensor_bytes = info["n_params"], formulas.bytes_per_token(info)
    return Totals(n_params, tensor_bytes, info["file_size_bytes"], info["file_size_bytes"] - tensor_bytes,
                  8 * tensor_bytes / n_params)


@dataclass(frozen=True)
class TotalsRow:
    quantity: str = column("quantity")
    this_model: int | float = column("this model")
    server: int | None = column("server's /v1/models")
    specimen: int | float | None = column("published specimen")


def totals_rows(tot: Totals, server_meta: dict) -> list[TotalsRow]:
    """This file's totals beside the server's /v1/models meta and the published specimen."""
    return [
        TotalsRow("parameters (sum of tensor elements)", tot.n_params, server_meta.get("n_params"), SPECIMEN["n_params"]),
        TotalsRow("tensor bytes", tot.tensor_bytes, server_meta.get("size"), None),
        TotalsRow("file size (bytes)", tot.file_bytes, None, SPECIMEN["file_bytes"]),
        TotalsRow("header and padding (bytes)", tot.overhead_bytes, None, None),
        TotalsRow("average bits per parameter", tot.bits_per_param, None, 8 * SPECIMEN["file_bytes"] / SPECIMEN["n_params"]),
    ]


@dataclass(frozen=True)
class WorkRow:
    model: str = column("model")
    params: int = column("parameters")
    bytes: float = column("bytes read", "bytes")
    gflops: float = column("FLOPs", "GFLOP")
    flops_per_byte: float = column("FLOPs per byte")


def work_row(name: str, w: TokenWork) -> WorkRow:
    return WorkRow(name, w.params, w.bytes, w.flops / 1e9, w.flops_per_byte)


@dataclass(frozen=True)
class StrictBytes:
    """Decode reads one row of token_embd per token, not all of it (when the output matrix is separate)."""

    row_bytes: int
    embd_bytes: int
    bytes_per_token: float
    tokens_per_s: float   # the ceiling at the reference bandwidth


def strict_bytes(bytes_per_token: float, embd_bytes: int, row_bytes: int, ref_gbs: float) -> StrictBytes:
    strict = bytes_per_token - embd_bytes + row_bytes
    return StrictBytes(row_bytes, embd_bytes, strict, ceiling.ceiling_at(ref_gbs, strict))


def reference_bandwidth(ceil: Ceiling) -> tuple[float, str]:
    """The bandwidth the last ceiling sentences use: the server's own where known (bytesup.course.ceiling's
    server_bandwidth), else this host's CPU median, labelled as such."""
    ref = ceiling.server_bandwidth(ceil.bandwidth.median, host_applies=ceil.host_applies, given_gbs=ceil.given_gbs)
    if ref is None:
        return ceil.bandwidth.median, "this host's CPU median"
    return ref.gbs, ("this host's median" if ref.host_cpu else "the given bandwidth")


@dataclass(frozen=True)
class HyperparameterRow:
    name: str = column("property")
    this_model: Any = column("this model")
    specimen: int | None = column(f"published specimen ({published.SPECIMEN_NAME})")
    source: str = column("read from")


def hyperparameter_rows(info: dict) -> list[HyperparameterRow]:
    """property, this model, published specimen (where the course states it), GGUF source."""
    hp = info["hyperparameters"]
    arch = info["architecture"]
    rope_note = lambda flag: " (absent: llama.cpp's default)" if hp.get(flag) else ""  # noqa: E731
    return [
        HyperparameterRow("architecture", shown(arch), None, "general.architecture"),
        HyperparameterRow("blocks (layers)", shown(hp.get("n_layer")), SPECIMEN["n_layer"], f"{arch}.block_count"),
        HyperparameterRow("model width", shown(hp.get("n_embd")), SPECIMEN["n_embd"], f"{arch}.embedding_length"),
        HyperparameterRow("attention heads", shown(hp.get("n_head")), SPECIMEN["n_head"], f"{arch}.attention.head_count"),
        HyperparameterRow("KV heads", shown(hp.get("n_head_kv")), None, f"{arch}.attention.head_count_kv"),
        HyperparameterRow("head width", shown(hp.get("head_dim")), None, "model width ÷ heads, or attention.key_length"),
        HyperparameterRow("feed-forward width", shown(hp.get("n_ff")), SPECIMEN["n_ff"], f"{arch}.feed_forward_length"),
        HyperparameterRow("vocabulary", shown(hp.get("n_vocab")), SPECIMEN["n_vocab"], "tokenizer.ggml.tokens (length)"),
        HyperparameterRow("context length (training)", shown(hp.get("n_ctx_train")), None, f"{arch}.context_length"),
        HyperparameterRow("RoPE base", shown(hp.get("rope_freq_base")), None,
                          f"{arch}.rope.freq_base" + rope_note("rope_freq_base_default")),
        HyperparameterRow("RoPE dimensions", shown(hp.get("rope_dimension_count")), None,
                          f"{arch}.rope.dimension_count" + rope_note("rope_dimension_count_default")),
        HyperparameterRow("file type", shown((info["file_type"] or {}).get("name")), None, "general.file_type"),
        HyperparameterRow("file size", info["file_size_bytes"], SPECIMEN["file_bytes"], "bytes on disk"),
        HyperparameterRow("GGUF version", info["gguf_version"], None, "header"),
    ]


@dataclass(frozen=True)
class CeilingRow:
    source: str = column("bandwidth source")
    model: str = column("model")
    bandwidth: float = column("bandwidth", "GB/s")
    bytes_per_token: float = column("bytes per token", "bytes")
    tokens_per_s: float = column("ceiling", "tokens/s")


def ceiling_rows(ceil: Ceiling | None, model_name: str) -> list[CeilingRow]:
    """The published example, then bytesup.course.ceiling's sources (the given bandwidth, this host's median, min and max)."""
    pub_bytes = SPECIMEN["file_bytes"]
    pub_gbs = published.SPARK_BANDWIDTH_GB_PER_S
    rows = [CeilingRow(PUBLISHED_HOST, PUBLISHED_MODEL, pub_gbs, pub_bytes, ceiling.ceiling_at(pub_gbs, pub_bytes))]
    if ceil is not None:
        rows += [CeilingRow(s.label, model_name, s.bandwidth_gbs, ceil.bytes_per_token, s.tokens_per_s) for s in ceil.sources()]
    return rows


# --- rendering: tables and their notes ---------------------------------------------------------

def hyperparameter_notes(model_name: str, hp: dict) -> list[str]:
    """The shape sentences under the hyperparameter table; a missing or per-layer value is said to be."""
    n_embd, n_head, n_kv, head_dim, n_ff = (
        number(hp.get(k)) for k in ("n_embd", "n_head", "n_head_kv", "head_dim", "n_ff"))
    notes = [f"{model_name}: {shown(hp.get('n_layer'))} blocks of width {shown(hp.get('n_embd'))}."]
    if n_head and head_dim and n_embd:
        product = n_head * head_dim
        notes.append(f"{n_head} heads × {head_dim} = {product} "
                     f"({'equals' if product == n_embd else 'differs from'} the model width).")
    else:
        notes.append("Heads × head width cannot be checked against the model width: "
                     f"heads {shown(hp.get('n_head'))}, head width {shown(hp.get('head_dim'))}.")
    if n_head and n_kv and n_kv < n_head:
        notes.append(f"{n_head} query heads share {n_kv} KV heads, {n_head / n_kv:g} query heads per KV head "
                     f"(grouped-query attention): the KV cache holds {n_kv} keys and values per layer and token "
                     f"instead of {n_head}, {n_head / n_kv:g}× less memory (lesson 6).")
    elif n_head and n_kv:
        notes.append(f"{n_head} query heads and {n_kv} KV heads: each query head has its own keys and values "
                     "(no grouped-query attention).")
    else:
        notes.append(f"Query heads {shown(hp.get('n_head'))}, KV heads {shown(hp.get('n_head_kv'))}: "
                     "no single ratio of query heads to KV heads.")
    published_ratio = SPECIMEN["n_ff"] / SPECIMEN["n_embd"]
    if n_ff and n_embd:
        notes.append(f"The feed-forward width is {n_ff / n_embd:.4g} × the model width "
                     f"(published specimen: {published_ratio:.4g} ×).")
    else:
        notes.append(f"Feed-forward width {shown(hp.get('n_ff'))}, model width {shown(hp.get('n_embd'))}: "
                     f"no single ratio (published specimen: {published_ratio:.4g} ×).")
    return notes


def show_hyperparameters(ctx: LessonContext, info: dict, model_name: str) -> None:
    ctx.table(
        "architecture", "Architecture and hyperparameters",
        columns(HyperparameterRow), cells(hyperparameter_rows(info)),
        notes=hyperparameter_notes(model_name, info["hyperparameters"]),
    )


def blocks_sentence(n_tensors: int, per_block: dict[int, int]) -> str:
    in_blocks = sum(per_block.values())
    if not per_block:
        return "none of them in numbered blocks."
    low, high = min(per_block.values()), max(per_block.values())
    each = f"{low}" if low == high else f"{low}–{high}"
    return f"{each} in each of the {len(per_block)} blocks, {n_tensors - in_blocks} outside them."


def embedding_shape_note(embd: dict | None, hp: dict) -> str:
    if embd is None:
        return "Shapes are in llama.cpp's order, row length first; this file has no 2-D token_embd."
    width, n_rows = embd["shape"]
    n_vocab = number(hp.get("n_vocab"))
    if n_vocab is None or n_rows == n_vocab:
        vocab = "one per token id"
    elif n_rows > n_vocab:
        vocab = f"{n_rows - n_vocab:,} more than the vocabulary's {n_vocab:,} entries (padding)"
    else:
        vocab = f"{n_vocab - n_rows:,} fewer than the vocabulary's {n_vocab:,} entries"
    return (f"Shapes are in llama.cpp's order, row length first: token_embd is {shape_text(embd['shape'])}, "
            f"{n_rows:,} rows of width {width:,}, {vocab}.")


def show_tensors(ctx: LessonContext, info: dict, tensors: list[TensorEntry]) -> None:
    biggest = max(tensors, key=lambda t: t.bytes)
    ctx.table(
        "tensors", "Every tensor in the file",
        columns(TensorEntry), cells(tensors),
        notes=[
            f"{len(tensors)} tensors: {blocks_sentence(len(tensors), block_counts(info))}",
            embedding_shape_note(token_embd(info), info["hyperparameters"]),
            (f"The largest tensor is {biggest.name} ({biggest.bytes:,} bytes, "
            f"{100 * biggest.bytes / info['tensor_bytes']:.1f}% of all tensor bytes)."),
        ],
    )


def server_agreement(meta: dict, n_params: int, tensor_bytes: int) -> str:
    if not meta:
        return "The server's /v1/models gives no model meta to compare with."
    parts = []
    for label, mine, theirs in (("parameters", n_params, meta.get("n_params")), ("tensor bytes", tensor_bytes, meta.get("size"))):
        if theirs is None:
            parts.append(f"{label}: not reported")
        else:
            parts.append(f"{label} {'agree' if theirs == mine else f'differ ({theirs:,} vs {mine:,})'}")
    return "The server's /v1/models and this file: " + "; ".join(parts) + "."


def show_totals(ctx: LessonContext, tot: Totals, server_meta: dict) -> None:
    ctx.table(
        "totals", "Parameters and bytes",
        columns(TotalsRow), cells(totals_rows(tot, server_meta)),
        notes=[
            f"{tot.n_params:,} parameters ({tot.n_params / 1e6:,.4g} million) in {tot.tensor_bytes:,} bytes of tensor data.",
            (f"The header (metadata, tokenizer, tensor index) and alignment padding take {tot.overhead_bytes:,} bytes, "
            f"{100 * tot.overhead_bytes / tot.file_bytes:.2f}% of the file."),
            server_agreement(server_meta, tot.n_params, tot.tensor_bytes),
            f"This model has {tot.n_params / SPECIMEN['n_params']:.3g} × the published specimen's parameters.",
        ],
    )


def type_note(s: TypeShare) -> str:
    layout = (f"{s.type} stores blocks of {s.block_elements} values in {s.block_bytes} bytes" if s.block_elements > 1
              else f"{s.type} stores each value in {s.block_bytes} bytes")
    return layout + f": {s.bits_per_param:.4g} bits per parameter, {s.share_percent:.2f}% of the bytes."


def show_bytes_by_type(ctx: LessonContext, shares: list[TypeShare]) -> None:
    ctx.table(
        "bytes_by_type", "Bytes by storage type",
        columns(TypeShare), cells(shares),
        notes=[type_note(s) for s in shares],
    )


def show_groups(ctx: LessonContext, groups: list[GroupShare], n_blocks: Any) -> None:
    share = {g.part: g.params_percent for g in groups}
    top = max(groups, key=lambda g: g.params)
    notes = [
        f"The {top.part} part holds the most parameters: {top.params_percent:.1f}%.",
        (f"Attention and feed-forward together, the {n_blocks} blocks: "
        f"{share.get('attention', 0) + share.get('feed-forward', 0):.1f}%; "
        f"embedding and output, the vocabulary-sized matrices: "
        f"{share.get('embedding', 0) + share.get('output', 0):.1f}%."),
    ]
    if not share.get("output"):
        notes.append("The file has no output.weight: the logits reuse token_embd (tied embeddings), so the output part is empty.")
    ctx.table(
        "parameter_groups", "Where the parameters are",
        columns(GroupShare), cells(groups),
        notes=notes,
    )


def show_work(ctx: LessonContext, model_name: str, work: TokenWork, published_work: TokenWork) -> None:
    ctx.table(
        "work_per_token", "Work per decoded token",
        columns(WorkRow), cells([work_row(model_name, work), work_row(PUBLISHED_MODEL, published_work)]),
        notes=[
            (f"One token reads all {work.bytes:,} bytes of weights and does about 2 × {work.params:,} = "
            f"{work.flops / 1e9:.4g} GFLOP: {work.flops_per_byte:.3g} FLOPs per byte read."),
        ],
    )


def ceiling_notes(*, model_name: str, reading: dict, ceil: Ceiling, work: TokenWork, reason: str | None,
                  strict: StrictBytes | None, tied_embd_bytes: int | None) -> list[str]:
    """The sentences under the ceiling table; which ones apply depends on where the server decodes."""
    host_ceiling = ceiling.ceiling_at(ceil.bandwidth.median, ceil.bytes_per_token)
    read = hostbench.describe_reading(reading)
    read = read[0].upper() + read[1:]
    notes = []
    if ceil.host_applies:
        notes.append(f"{read}; {reason or 'the server decodes on this CPU'}, "
                     f"so decoding {model_name} there cannot beat {host_ceiling:,.0f} tokens/s.")
    else:
        notes.append(f"{read}: {host_ceiling:,.0f} tokens/s is a ceiling for CPU decode on this host, not for the "
                     f"server, because {reason or 'the server does not decode on this CPU'}.")
        if ceil.given_gbs is None:
            notes.append("Pass --bandwidth-gbs with the memory bandwidth of the device the server decodes on "
                         "to get the server's ceiling.")
    if ceil.given_gbs is not None and ceil.given_ceiling is not None:
        notes.append(f"With the given {ceil.given_gbs:g} GB/s, decoding {model_name} cannot beat "
                     f"{ceil.given_ceiling:,.0f} tokens/s, {ceil.given_ceiling / host_ceiling:.3g} × this host's measured CPU ceiling.")
    ref_gbs, ref_label = reference_bandwidth(ceil)
    ref_ceiling = ceiling.ceiling_at(ref_gbs, ceil.bytes_per_token)
    if tied_embd_bytes:
        notes.append(f"token_embd is also the output matrix (tied embeddings, no output.weight): every token's logits "
                     f"multiply by all {tied_embd_bytes:,} bytes of it, so decode reads it whole once per token, and the "
                     f"bytes per token count it once ({100 * tied_embd_bytes / ceil.bytes_per_token:.1f}% of them).")
    elif strict is not None:
        notes.append(f"Strictly, decode reads one {strict.row_bytes:,}-byte row of token_embd per token, not all "
                     f"{strict.embd_bytes:,} bytes of it: {strict.bytes_per_token:,} bytes per token, a ceiling of "
                     f"{strict.tokens_per_s:,.0f} tokens/s at {ref_label} "
                     f"({100 * strict.embd_bytes / ceil.bytes_per_token:.1f}% of the bytes are the embedding table).")
    notes.append(f"At {ref_label} ceiling of {ref_ceiling:,.0f} tokens/s the arithmetic is "
                 f"{ref_ceiling * work.flops / 1e9:,.4g} GFLOP/s ({work.flops / 1e9:.4g} GFLOP per token).")
    return notes


def published_ceiling_note() -> str:
    pub_gbs, pub_bytes = published.SPARK_BANDWIDTH_GB_PER_S, SPECIMEN["file_bytes"]
    pub = ceiling.ceiling_at(pub_gbs, pub_bytes)
    return (f"Published example: {pub_gbs:g} GB/s ÷ {pub_bytes / GB:g} GB = {pub:.1f} tokens/s "
            f"(the course quotes {PUBLISHED_CEILING:g}; computed ÷ quoted = {pub / PUBLISHED_CEILING:.3f}).")


def show_ceiling(ctx: LessonContext, info: dict, model_name: str, inputs: BandwidthInputs, ceil: Ceiling, work: TokenWork) -> None:
    embd = token_embd(info)
    tied = bool(info.get("tied_output")) and embd is not None and embd["n_bytes"] > 0
    row_bytes = embedding_row_bytes(info)
    strict = None
    if not tied and embd is not None and embd["n_bytes"] and row_bytes is not None:
        strict = strict_bytes(ceil.bytes_per_token, embd["n_bytes"], row_bytes, reference_bandwidth(ceil)[0])
    ctx.table(
        "bandwidth_ceiling", "The bandwidth ceiling: tokens/s ≤ bandwidth ÷ bytes per token",
        columns(CeilingRow), cells(ceiling_rows(ceil, model_name)),
        notes=[published_ceiling_note()]
        + ceiling_notes(model_name=model_name, reading=inputs.reading, ceil=ceil, work=work,
                        reason=inputs.facts.get("reason"), strict=strict,
                        tied_embd_bytes=embd["n_bytes"] if tied and embd else None),
    )


def measure_ceiling(ctx: LessonContext, inputs: BandwidthInputs, ceil: Ceiling) -> None:
    bw_settings = {"threads": inputs.reading["threads"]}
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", list(ceil.bandwidth_gbs), higher_is_better=True,
                settings=bw_settings, description=inputs.reading["method"])
    ctx.measure("decode_ceiling_tokens_per_s_measured_bandwidth" if ceil.host_applies else "host_cpu_decode_ceiling_tokens_per_s",
                "tokens/s", list(ceil.ceilings), higher_is_better=None, settings=bw_settings,
                description="each bandwidth sample ÷ bytes per token"
                + ("" if ceil.host_applies else f": CPU decode on this host, not the server ({inputs.facts['reason']})"))
    if ceil.given_gbs is not None and ceil.given_ceiling is not None:
        ctx.measure("decode_ceiling_tokens_per_s_given_bandwidth", "tokens/s", [ceil.given_ceiling], higher_is_better=None,
                    settings={"bandwidth_gbs": ceil.given_gbs}, description="--bandwidth-gbs ÷ bytes per token")


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    # 1. The header: hyperparameters, read before any request.
    ctx.step("reading the GGUF header")
    info = read_header(ctx)
    model_name = info.get("name") or ctx.identity.get("model", {}).get("name") or "this model"
    ctx.settings["model_file"] = ctx.identity.get("model", {}).get("file")
    show_hyperparameters(ctx, info, model_name)

    # 2. Every tensor: name, shape, type, elements, bytes.
    show_tensors(ctx, info, tensor_entries(info))

    # 3. Parameter count and bytes, beside the server's own /v1/models meta.
    tot = totals(info)
    show_totals(ctx, tot, ctx.server.served_meta())
    ctx.measure("n_params", "parameters", [tot.n_params], higher_is_better=None,
                description="sum of the elements of every tensor in the GGUF")

    # 4. Bytes by storage type; 5. where the parameters are.
    show_bytes_by_type(ctx, type_shares(info))
    show_groups(ctx, group_shares(info), len(block_counts(info)) or shown(info["hyperparameters"].get("n_layer")))

    # 6. The work of one decoded token: every weight read once, ~2 FLOPs per weight.
    work = token_work(tot.n_params, tot.tensor_bytes)
    show_work(ctx, model_name, work, token_work(SPECIMEN["n_params"], SPECIMEN["file_bytes"]))
    ctx.measure("bytes_per_token", "bytes", [tot.tensor_bytes], higher_is_better=None,
                description="bytes of weights read per decoded token (every tensor once)")

    # 7. The bandwidth ceiling: bandwidth ÷ bytes per token (bytesup.course.ceiling).
    ctx.step("measuring this host's memory read bandwidth")
    inputs = bandwidth_inputs(ctx)
    ctx.settings["bandwidth_gbs"] = inputs.given_gbs
    ctx.settings["read_bandwidth"] = {"threads": inputs.reading["threads"], "bytes_per_thread": inputs.reading["bytes_per_thread"]}
    ceil = ceiling.bandwidth_ceiling(tot.tensor_bytes, inputs.reading["gb_per_s"]["samples"],
                                     host_applies=bool(inputs.facts["host_bandwidth_applies"]), given_gbs=inputs.given_gbs)
    show_ceiling(ctx, info, model_name, inputs, ceil, work)
    measure_ceiling(ctx, inputs, ceil)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
