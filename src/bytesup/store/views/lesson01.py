"""Lesson 1's view: the records of what a model is on disk, and the tables and notes that show them.

Each table is a `Table` built from the lesson's records by their declared columns (`store.rows.column`), with the
sentences computed from the same records; the lesson adds them to its result in order. Nothing here reads the file,
the server or the clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bytesup.course import ceiling, published
from bytesup.course.ceiling import Ceiling, TokenWork
from bytesup.host import hostbench
from bytesup.store.results import Plot, Series, Table
from bytesup.store.rows import column
from bytesup.store.views import table
from bytesup.units import GB

SPECIMEN: dict[str, Any] = published.SPECIMEN
# Published reference values come from the course outline; they are only ever shown labelled "published".
PUBLISHED_MODEL = f"{published.SPECIMEN_NAME} (published)"
PUBLISHED_HOST = f"{published.SPARK_NAME} (published)"
PUBLISHED_CEILING: float = published.LESSON4["ceiling_tokens_per_s"]
NOT_IN_FILE = "not in the file"


# --- the records ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorEntry:
    name: str = column("name")
    shape: str = column("shape", "elements")   # llama.cpp's order, row length first
    type: str = column("type")
    elements: int = column("elements")
    bytes: int = column("bytes")


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


@dataclass(frozen=True)
class GroupShare:
    """One part of the network: its parameters, tensors and bytes, and their shares of the whole."""

    part: str = column("part")   # "feed-forward", not "feed_forward"
    params: int = column("parameters")
    params_percent: float = column("share of parameters", "%")
    tensors: int = column("tensors")
    bytes: int = column("bytes", "bytes")
    bytes_percent: float = column("share of bytes", "%")


@dataclass(frozen=True)
class Totals:
    n_params: int
    tensor_bytes: int     # the bytes decode reads per token: every weight once
    file_bytes: int
    overhead_bytes: int   # header (metadata, tokenizer, tensor index) and alignment padding
    bits_per_param: float


@dataclass(frozen=True)
class StrictBytes:
    """Decode reads one row of token_embd per token, not all of it (when the output matrix is separate)."""

    row_bytes: int
    embd_bytes: int
    bytes_per_token: float
    tokens_per_s: float   # the ceiling at the reference bandwidth


# --- hyperparameters as shown -------------------------------------------------------------------------

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


def architecture(info: dict, model_name: str) -> Table:
    return table("architecture", "Architecture and hyperparameters", HyperparameterRow, hyperparameter_rows(info),
                 hyperparameter_notes(model_name, info["hyperparameters"]))


# --- the tensors, the totals, the types and the parts -----------------------------------------------

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


def first_block(entries: list[TensorEntry]) -> list[TensorEntry]:
    """The tensors outside the numbered blocks, and those of the first block (blk.0.*), in file order."""
    def block(name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() else None
    first = min((int(b) for t in entries if (b := block(t.name)) is not None), default=None)
    return [t for t in entries if block(t.name) in (None, str(first))]


def tensors(info: dict, entries: list[TensorEntry], per_block: dict[int, int], embd: dict | None) -> list[Table]:
    """The tensors outside the blocks and those of the first block, read in the main text; every tensor under Details."""
    biggest = max(entries, key=lambda t: t.bytes)
    shown_here = first_block(entries)
    main = table("tensors_first_block", "The tensors outside the blocks, and those of the first block", TensorEntry,
                 shown_here, [
        f"{len(entries)} tensors: {blocks_sentence(len(entries), per_block)} All {len(entries)} are listed under Details.",
        embedding_shape_note(embd, info["hyperparameters"]),
        (f"The largest tensor is {biggest.name} ({biggest.bytes:,} bytes, "
         f"{100 * biggest.bytes / info['tensor_bytes']:.1f}% of all tensor bytes)."),
    ])
    full = table("tensors", "Every tensor in the file", TensorEntry, entries, [])
    full.detail = True
    return [main, full]


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


def totals(tot: Totals, server_meta: dict) -> Table:
    return table("totals", "Parameters and bytes", TotalsRow, totals_rows(tot, server_meta), [
        f"{tot.n_params:,} parameters ({tot.n_params / 1e6:,.4g} million) in {tot.tensor_bytes:,} bytes of tensor data.",
        (f"The header (metadata, tokenizer, tensor index) and alignment padding take {tot.overhead_bytes:,} bytes, "
         f"{100 * tot.overhead_bytes / tot.file_bytes:.2f}% of the file."),
        server_agreement(server_meta, tot.n_params, tot.tensor_bytes),
        f"This model has {tot.n_params / SPECIMEN['n_params']:.3g} × the published specimen's parameters.",
    ])


def type_note(s: TypeShare) -> str:
    layout = (f"{s.type} stores blocks of {s.block_elements} values in {s.block_bytes} bytes" if s.block_elements > 1
              else f"{s.type} stores each value in {s.block_bytes} bytes")
    return layout + f": {s.bits_per_param:.4g} bits per parameter, {s.share_percent:.2f}% of the bytes."


def bytes_by_type(shares: list[TypeShare]) -> Table:
    return table("bytes_by_type", "Bytes by storage type", TypeShare, shares, [type_note(s) for s in shares])


def parameter_groups(groups: list[GroupShare], n_blocks: Any) -> Table:
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
    return table("parameter_groups", "Where the parameters are", GroupShare, groups, notes)


# --- the work of a token and the bandwidth ceiling ----------------------------------------------------

@dataclass(frozen=True)
class WorkRow:
    model: str = column("model")
    params: int = column("parameters")
    bytes: float = column("bytes read", "bytes")
    gflops: float = column("FLOPs", "GFLOP")
    flops_per_byte: float = column("FLOPs per byte")


def work_row(name: str, w: TokenWork) -> WorkRow:
    return WorkRow(name, w.params, w.bytes, w.flops / 1e9, w.flops_per_byte)


def work_per_token(model_name: str, work: TokenWork, published_work: TokenWork) -> Table:
    return table("work_per_token", "Work per decoded token", WorkRow,
                 [work_row(model_name, work), work_row(PUBLISHED_MODEL, published_work)], [
        (f"One token reads all {work.bytes:,} bytes of weights and does about 2 × {work.params:,} = "
         f"{work.flops / 1e9:.4g} GFLOP: {work.flops_per_byte:.3g} FLOPs per byte read."),
    ])


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


def reference_bandwidth(ceil: Ceiling) -> tuple[float, str]:
    """The bandwidth the last ceiling sentences use: the server's own where known (bytesup.course.ceiling's
    server_bandwidth), else this host's CPU median, labelled as such."""
    ref = ceiling.server_bandwidth(ceil.bandwidth.median, host_applies=ceil.host_applies, given_gbs=ceil.given_gbs)
    if ref is None:
        return ceil.bandwidth.median, "this host's CPU median"
    return ref.gbs, ("this host's median" if ref.host_cpu else "the given bandwidth")


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


def shows(model_name: str, tot: Totals, ceil: Ceiling, reason: str | None) -> str:
    """What the run shows: the bytes one token reads, and the most tokens per second the measured bandwidth allows
    (for the server where it decodes on this CPU, else for this CPU alone, and at a given bandwidth where given)."""
    host_ceiling = ceiling.ceiling_at(ceil.bandwidth.median, ceil.bytes_per_token)
    text = (f"{model_name} holds {tot.n_params:,} parameters in {tot.tensor_bytes:,} bytes of tensors "
            f"({tot.bits_per_param:.3g} bits per parameter), and decoding one token reads every one of those bytes.")
    if ceil.host_applies:
        text += (f" This host's memory reads {ceil.bandwidth.median:.3g} GB/s (the median of {len(ceil.bandwidth_gbs)} "
                 f"samples), and the server decodes on this CPU, so it cannot decode faster than {host_ceiling:,.0f} tokens/s.")
    else:
        text += (f" This host's memory reads {ceil.bandwidth.median:.3g} GB/s, a ceiling of {host_ceiling:,.0f} tokens/s "
                 f"for decoding on this CPU, which does not bound the server: {reason or 'it does not decode on this CPU'}.")
    if ceil.given_gbs is not None and ceil.given_ceiling is not None:
        text += f" At the given {ceil.given_gbs:g} GB/s the ceiling is {ceil.given_ceiling:,.0f} tokens/s."
    return text


def ceiling_plot(model_name: str, ceil: Ceiling) -> Plot:
    """The ceiling against bandwidth for this model's bytes per token: the line bandwidth ÷ bytes, this host's
    samples on it (median, lowest and highest), and the published machine's bandwidth and the given one on it."""
    marks = [(f"this host (median, min–max of {len(ceil.bandwidth_gbs)})", ceil.bandwidth.median, ceil.bandwidth.min,
              ceil.bandwidth.max),
             (f"{published.SPARK_NAME}'s published {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s",
              published.SPARK_BANDWIDTH_GB_PER_S, None, None)]
    if ceil.given_gbs is not None:
        marks.append((f"given {ceil.given_gbs:g} GB/s", ceil.given_gbs, None, None))
    low_end, top = 0.5 * min(gbs for _, gbs, _, _ in marks), 2 * max(gbs for _, gbs, _, _ in marks)

    def at(gbs: float) -> float:
        return ceiling.ceiling_at(gbs, ceil.bytes_per_token)

    series = [Series(label=f"{model_name}: bandwidth ÷ {ceil.bytes_per_token:,.0f} bytes per token", x=[low_end, top],
                     y=[at(low_end), at(top)], style="dashed")]
    for label, gbs, low, high in marks:
        series.append(Series(label=label, x=[gbs], y=[at(gbs)], y_min=None if low is None else [at(low)],
                             y_max=None if high is None else [at(high)], style="points"))
    return Plot(name="bandwidth_ceiling", title="Decode's ceiling by memory bandwidth",
                x_label="memory bandwidth (GB/s)", y_label="decode ceiling (tokens/s)", series=series,
                log_x=True, log_y=True)


def bandwidth_ceiling(model_name: str, reading: dict, reason: str | None, ceil: Ceiling, work: TokenWork,
                      strict: StrictBytes | None, tied_embd_bytes: int | None) -> Table:
    return table("bandwidth_ceiling", "The bandwidth ceiling: tokens/s ≤ bandwidth ÷ bytes per token",
                 CeilingRow, ceiling_rows(ceil, model_name),
                 [published_ceiling_note()]
                 + ceiling_notes(model_name=model_name, reading=reading, ceil=ceil, work=work, reason=reason,
                                 strict=strict, tied_embd_bytes=tied_embd_bytes))
