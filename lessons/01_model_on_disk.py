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

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

from collections import Counter
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup import formulas, hostbench, published
from bytesup.gguf_read import read_model_info
from bytesup.lesson import LessonContext

TITLE = "What a model is on disk"

GB = formulas.GB
MiB = 2**20

# Published reference values come from bytesup.published (the course outline); they are only
# ever shown labelled "published".
SPECIMEN = published.SPECIMEN
PUBLISHED_MODEL = f"{published.SPECIMEN_NAME} (published)"
PUBLISHED_HOST = f"{published.SPARK_NAME} (published)"
PUBLISHED_CEILING = published.LESSON4["ceiling_tokens_per_s"]

GROUPS = ("embedding", "attention", "feed_forward", "norms", "output", "other")
NOT_IN_FILE = "not in the file"


# --- pure helpers (tested on their own) -------------------------------------------------

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


def tensor_rows(info: dict) -> list[list[Any]]:
    """name, shape, type, elements, bytes for every tensor, in file order."""
    return [[t["name"], shape_text(t["shape"]), t["type"], t["n_elements"], t["n_bytes"]] for t in info["tensors"]]


def bytes_by_type_rows(info: dict) -> list[list[Any]]:
    """Per storage type (read_model_info's bytes_by_type and params_by_type): tensors, parameters,
    bytes, bits per parameter, block layout, share of bytes."""
    counts = Counter(t["type"] for t in info["tensors"])
    total = info["tensor_bytes"]
    rows = []
    for name, nbytes in info["bytes_by_type"].items():
        params = info["params_by_type"][name]
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
        rows.append([name, counts[name], params, nbytes, 8 * nbytes / params, block, block_bytes, 100 * nbytes / total])
    return rows


def group_rows(info: dict) -> list[list[Any]]:
    """Per part of the network (read_model_info's *_by_group): parameters, % of parameters, tensors,
    bytes, % of bytes. "other" is listed only when some tensor falls into it."""
    n_params, n_bytes = info["n_params"], info["tensor_bytes"]
    params, nbytes, counts = info["params_by_group"], info["bytes_by_group"], info["tensors_by_group"]
    return [
        [g.replace("_", "-"), params.get(g, 0), 100 * params.get(g, 0) / n_params,
         counts.get(g, 0), nbytes.get(g, 0), 100 * nbytes.get(g, 0) / n_bytes]
        for g in GROUPS
        if params.get(g, 0) or g != "other"
    ]


def token_embd(info: dict) -> dict | None:
    """The token_embd.weight entry of the tensor list, when it is a 2-D matrix."""
    t = next((t for t in info["tensors"] if t["name"] == "token_embd.weight"), None)
    return t if t is not None and len(t["shape"]) == 2 else None


def embedding_row_bytes(info: dict) -> int | None:
    """Bytes of one row of token_embd: its bytes ÷ its own row count (shape is [n_embd, n_rows],
    and n_rows may exceed the vocabulary when the table is padded)."""
    t = token_embd(info)
    return t["n_bytes"] // t["shape"][1] if t and t["shape"][1] else None


def hyperparameter_rows(info: dict) -> list[list[Any]]:
    """property, this model, published specimen (where the course states it), GGUF source."""
    hp = info["hyperparameters"]
    arch = info["architecture"]
    rope_note = lambda flag: " (absent: llama.cpp's default)" if hp.get(flag) else ""  # noqa: E731
    return [
        ["architecture", shown(arch), None, "general.architecture"],
        ["blocks (layers)", shown(hp.get("n_layer")), SPECIMEN["n_layer"], f"{arch}.block_count"],
        ["model width", shown(hp.get("n_embd")), SPECIMEN["n_embd"], f"{arch}.embedding_length"],
        ["attention heads", shown(hp.get("n_head")), SPECIMEN["n_head"], f"{arch}.attention.head_count"],
        ["KV heads", shown(hp.get("n_head_kv")), None, f"{arch}.attention.head_count_kv"],
        ["head width", shown(hp.get("head_dim")), None, "model width ÷ heads, or attention.key_length"],
        ["feed-forward width", shown(hp.get("n_ff")), SPECIMEN["n_ff"], f"{arch}.feed_forward_length"],
        ["vocabulary", shown(hp.get("n_vocab")), SPECIMEN["n_vocab"], "tokenizer.ggml.tokens (length)"],
        ["context length (training)", shown(hp.get("n_ctx_train")), None, f"{arch}.context_length"],
        ["RoPE base", shown(hp.get("rope_freq_base")), None, f"{arch}.rope.freq_base" + rope_note("rope_freq_base_default")],
        ["RoPE dimensions", shown(hp.get("rope_dimension_count")), None,
         f"{arch}.rope.dimension_count" + rope_note("rope_dimension_count_default")],
        ["file type", shown((info["file_type"] or {}).get("name")), None, "general.file_type"],
        ["file size", info["file_size_bytes"], SPECIMEN["file_bytes"], "bytes on disk"],
        ["GGUF version", info["gguf_version"], None, "header"],
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


def block_counts(info: dict) -> dict[int, int]:
    """Tensors per block, from the names blk.N.*."""
    counts: Counter[int] = Counter()
    for t in info["tensors"]:
        parts = t["name"].split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            counts[int(parts[1])] += 1
    return dict(sorted(counts.items()))


def ceiling_rows(bytes_per_tok: int, measured_gbs: dict | None, given_gbs: float | None,
                 model_name: str, host_applies: bool = True) -> list[list[Any]]:
    """source, model, bandwidth (GB/s), bytes per token, ceiling (tokens/s) = bandwidth ÷ bytes.

    When the server does not decode on this host's CPU (host_applies False) the measured rows
    stay, labelled as a ceiling for CPU decode on this host, not for the server."""
    def row(source: str, model: str, gbs: float, nbytes: float) -> list[Any]:
        return [source, model, gbs, nbytes, formulas.ceiling_tokens_per_s(gbs * GB, nbytes)]

    rows = [row(PUBLISHED_HOST, PUBLISHED_MODEL, published.SPARK_BANDWIDTH_GB_PER_S, SPECIMEN["file_bytes"])]
    if given_gbs is not None:
        rows.append(row("given (--bandwidth-gbs)", model_name, float(given_gbs), bytes_per_tok))
    if measured_gbs is not None:
        scope = "" if host_applies else ", CPU decode here, not the server"
        for stat in ("median", "min", "max"):
            rows.append(row(f"this host, measured ({stat}{scope})", model_name, measured_gbs[stat], bytes_per_tok))
    return rows


def ceiling_notes(*, model_name: str, bw: dict, bytes_per_tok: int, flops: float, given: float | None,
                  facts: dict, row_bytes: int | None, embd_bytes: int | None, tied: bool = False) -> list[str]:
    """The sentences under the ceiling table; which ones apply depends on where the server decodes."""
    gbs = bw["gb_per_s"]
    applies = bool(facts.get("host_bandwidth_applies"))
    host_ceiling = formulas.ceiling_tokens_per_s(gbs["median"] * GB, bytes_per_tok)
    read = hostbench.describe_reading(bw)
    read = read[0].upper() + read[1:]
    notes = []
    if applies:
        notes.append(f"{read}; {facts.get('reason', 'the server decodes on this CPU')}, "
                     f"so decoding {model_name} there cannot beat {host_ceiling:,.0f} tokens/s.")
    else:
        notes.append(f"{read}: {host_ceiling:,.0f} tokens/s is a ceiling for CPU decode on this host, not for the "
                     f"server, because {facts.get('reason', 'the server does not decode on this CPU')}.")
        if given is None:
            notes.append("Pass --bandwidth-gbs with the memory bandwidth of the device the server decodes on "
                         "to get the server's ceiling.")
    if given is not None:
        given_ceiling = formulas.ceiling_tokens_per_s(float(given) * GB, bytes_per_tok)
        notes.append(f"With the given {float(given):g} GB/s, decoding {model_name} cannot beat "
                     f"{given_ceiling:,.0f} tokens/s, {given_ceiling / host_ceiling:.3g} × this host's measured CPU ceiling.")
    # The reference for the remaining sentences: the server's own bandwidth where known.
    if applies or given is None:
        ref_gbs, ref_label = gbs["median"], ("this host's median" if applies else "this host's CPU median")
    else:
        ref_gbs, ref_label = float(given), "the given bandwidth"
    ref_ceiling = formulas.ceiling_tokens_per_s(ref_gbs * GB, bytes_per_tok)
    if tied and embd_bytes:
        notes.append(f"token_embd is also the output matrix (tied embeddings, no output.weight): every token's logits "
                     f"multiply by all {embd_bytes:,} bytes of it, so decode reads it whole once per token, and the "
                     f"bytes per token count it once ({100 * embd_bytes / bytes_per_tok:.1f}% of them).")
    elif row_bytes is not None and embd_bytes:
        strict = bytes_per_tok - embd_bytes + row_bytes
        notes.append(f"Strictly, decode reads one {row_bytes:,}-byte row of token_embd per token, not all "
                     f"{embd_bytes:,} bytes of it: {strict:,} bytes per token, a ceiling of "
                     f"{formulas.ceiling_tokens_per_s(ref_gbs * GB, strict):,.0f} tokens/s at {ref_label} "
                     f"({100 * embd_bytes / bytes_per_tok:.1f}% of the bytes are the embedding table).")
    notes.append(f"At {ref_label} ceiling of {ref_ceiling:,.0f} tokens/s the arithmetic is "
                 f"{ref_ceiling * flops / 1e9:,.4g} GFLOP/s ({flops / 1e9:.4g} GFLOP per token).")
    return notes


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    # 1. The header: read before anything else, so a bad file fails before any request.
    ctx.step("reading the GGUF header")
    info = ctx.host("model_info", lambda: read_model_info(ctx.require_model()))
    hp = info["hyperparameters"]
    model_name = info.get("name") or ctx.identity.get("model", {}).get("name") or "this model"
    ctx.settings["model_file"] = ctx.identity.get("model", {}).get("file")

    ctx.table(
        "architecture", "Architecture and hyperparameters",
        [("property", ""), ("this model", ""), (f"published specimen ({published.SPECIMEN_NAME})", ""), ("read from", "")],
        hyperparameter_rows(info),
        notes=hyperparameter_notes(model_name, hp),
    )

    # 2. Every tensor.
    rows = tensor_rows(info)
    biggest = max(rows, key=lambda r: r[4])
    per_block = block_counts(info)
    in_blocks = sum(per_block.values())
    embd = token_embd(info)
    if not per_block:
        blocks_text = "none of them in numbered blocks."
    elif min(per_block.values()) == max(per_block.values()):
        blocks_text = f"{min(per_block.values())} in each of the {len(per_block)} blocks, {len(rows) - in_blocks} outside them."
    else:
        blocks_text = (f"{min(per_block.values())}–{max(per_block.values())} in each of the {len(per_block)} blocks, "
                       f"{len(rows) - in_blocks} outside them.")
    ctx.table(
        "tensors", "Every tensor in the file",
        [("name", ""), ("shape", "elements"), ("type", ""), ("elements", ""), ("bytes", "")],
        rows,
        notes=[
            f"{len(rows)} tensors: {blocks_text}",
            _embedding_shape_note(embd, hp),
            f"The largest tensor is {biggest[0]} ({biggest[4]:,} bytes, "
            f"{100 * biggest[4] / info['tensor_bytes']:.1f}% of all tensor bytes).",
        ],
    )

    # 3. Parameter count and bytes.
    n_params = info["n_params"]
    bytes_per_tok = formulas.bytes_per_token(info)
    server_meta = ctx.server.served_meta()
    overhead = info["file_size_bytes"] - bytes_per_tok
    ctx.table(
        "totals", "Parameters and bytes",
        [("quantity", ""), ("this model", ""), ("server's /v1/models", ""), ("published specimen", "")],
        [
            ["parameters (sum of tensor elements)", n_params, server_meta.get("n_params"), SPECIMEN["n_params"]],
            ["tensor bytes", bytes_per_tok, server_meta.get("size"), None],
            ["file size (bytes)", info["file_size_bytes"], None, SPECIMEN["file_bytes"]],
            ["header and padding (bytes)", overhead, None, None],
            ["average bits per parameter", 8 * bytes_per_tok / n_params, None, 8 * SPECIMEN["file_bytes"] / SPECIMEN["n_params"]],
        ],
        notes=[
            f"{n_params:,} parameters ({n_params / 1e6:,.4g} million) in {bytes_per_tok:,} bytes of tensor data.",
            f"The header (metadata, tokenizer, tensor index) and alignment padding take {overhead:,} bytes, "
            f"{100 * overhead / info['file_size_bytes']:.2f}% of the file.",
            _server_agreement(server_meta, n_params, bytes_per_tok),
            f"This model has {n_params / SPECIMEN['n_params']:.3g} × the published specimen's parameters.",
        ],
    )
    ctx.measure("n_params", "parameters", [n_params], higher_is_better=None,
                description="sum of the elements of every tensor in the GGUF")

    # 4. Bytes by storage type.
    type_rows = bytes_by_type_rows(info)
    ctx.table(
        "bytes_by_type", "Bytes by storage type",
        [("type", ""), ("tensors", ""), ("parameters", ""), ("bytes", ""), ("bits per parameter", ""),
         ("block", "elements"), ("block", "bytes"), ("share of bytes", "%")],
        type_rows,
        notes=[
            (f"{r[0]} stores blocks of {r[5]} values in {r[6]} bytes" if r[5] > 1 else f"{r[0]} stores each value in {r[6]} bytes")
            + f": {r[4]:.4g} bits per parameter, {r[7]:.2f}% of the bytes."
            for r in type_rows
        ],
    )

    # 5. Where the parameters are.
    grows = group_rows(info)
    share = {r[0]: r[2] for r in grows}
    top = max(grows, key=lambda r: r[1])
    ctx.table(
        "parameter_groups", "Where the parameters are",
        [("part", ""), ("parameters", ""), ("share of parameters", "%"), ("tensors", ""), ("bytes", "bytes"),
         ("share of bytes", "%")],
        grows,
        notes=[
            f"The {top[0]} part holds the most parameters: {top[2]:.1f}%.",
            f"Attention and feed-forward together, the {len(per_block) or shown(hp.get('n_layer'))} blocks: "
            f"{share.get('attention', 0) + share.get('feed-forward', 0):.1f}%; "
            f"embedding and output, the vocabulary-sized matrices: "
            f"{share.get('embedding', 0) + share.get('output', 0):.1f}%.",
        ] + ([] if share.get("output") else
             ["The file has no output.weight: the logits reuse token_embd (tied embeddings), so the output part is empty."]),
    )

    # 6. The work of one decoded token: every weight read once, ~2 FLOPs per weight.
    flops = formulas.flops_per_token(n_params)
    pub_flops = formulas.flops_per_token(SPECIMEN["n_params"])
    ctx.table(
        "work_per_token", "Work per decoded token",
        [("model", ""), ("parameters", ""), ("bytes read", "bytes"), ("FLOPs", "GFLOP"), ("FLOPs per byte", "")],
        [
            [model_name, n_params, bytes_per_tok, flops / 1e9, flops / bytes_per_tok],
            [PUBLISHED_MODEL, SPECIMEN["n_params"], SPECIMEN["file_bytes"], pub_flops / 1e9, pub_flops / SPECIMEN["file_bytes"]],
        ],
        notes=[
            f"One token reads all {bytes_per_tok:,} bytes of weights and does about 2 × {n_params:,} = "
            f"{flops / 1e9:.4g} GFLOP: {flops / bytes_per_tok:.3g} FLOPs per byte read.",
        ],
    )
    ctx.measure("bytes_per_token", "bytes", [bytes_per_tok], higher_is_better=None,
                description="bytes of weights read per decoded token (every tensor once)")

    # 7. The bandwidth ceiling: bandwidth ÷ bytes per token.
    ctx.step("measuring this host's memory read bandwidth")
    facts = ctx.server_facts()
    bw = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 7 and 8
    threads = bw["threads"]
    given = ctx.option("bandwidth_gbs")
    ctx.settings["bandwidth_gbs"] = given
    ctx.settings["read_bandwidth"] = {"threads": bw["threads"], "bytes_per_thread": bw["bytes_per_thread"]}
    gbs = bw["gb_per_s"]
    applies = bool(facts["host_bandwidth_applies"])
    ceil_rows = ceiling_rows(bytes_per_tok, gbs, given, model_name, host_applies=applies)
    pub = ceil_rows[0]
    embd_bytes = embd["n_bytes"] if embd else None
    ctx.table(
        "bandwidth_ceiling", "The bandwidth ceiling: tokens/s ≤ bandwidth ÷ bytes per token",
        [("bandwidth source", ""), ("model", ""), ("bandwidth", "GB/s"), ("bytes per token", "bytes"),
         ("ceiling", "tokens/s")],
        ceil_rows,
        notes=[
            f"Published example: {pub[2]:g} GB/s ÷ {pub[3] / GB:g} GB = {pub[4]:.1f} tokens/s "
            f"(the course quotes {PUBLISHED_CEILING:g}; computed ÷ quoted = {pub[4] / PUBLISHED_CEILING:.3f}).",
        ] + ceiling_notes(model_name=model_name, bw=bw, bytes_per_tok=bytes_per_tok, flops=flops, given=given,
                          facts=facts, row_bytes=embedding_row_bytes(info), embd_bytes=embd_bytes,
                          tied=bool(info.get("tied_output"))),
    )
    bw_settings = {"threads": threads}
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", gbs["samples"], higher_is_better=True,
                settings=bw_settings, description=bw["method"])
    ctx.measure("decode_ceiling_tokens_per_s_measured_bandwidth" if applies else "host_cpu_decode_ceiling_tokens_per_s",
                "tokens/s", [formulas.ceiling_tokens_per_s(s * GB, bytes_per_tok) for s in gbs["samples"]],
                higher_is_better=None, settings=bw_settings,
                description="each bandwidth sample ÷ bytes per token"
                + ("" if applies else f": CPU decode on this host, not the server ({facts['reason']})"))
    if given is not None:
        ctx.measure("decode_ceiling_tokens_per_s_given_bandwidth", "tokens/s",
                    [formulas.ceiling_tokens_per_s(float(given) * GB, bytes_per_tok)], higher_is_better=None,
                    settings={"bandwidth_gbs": float(given)}, description="--bandwidth-gbs ÷ bytes per token")
    return ctx.finish()


def _embedding_shape_note(embd: dict | None, hp: dict) -> str:
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


def _server_agreement(meta: dict, n_params: int, tensor_bytes: int) -> str:
    if not meta:
        return "The server's /v1/models gives no model meta to compare with."
    parts = []
    for label, mine, theirs in (("parameters", n_params, meta.get("n_params")), ("tensor bytes", tensor_bytes, meta.get("size"))):
        if theirs is None:
            parts.append(f"{label}: not reported")
        else:
            parts.append(f"{label} {'agree' if theirs == mine else f'differ ({theirs:,} vs {mine:,})'}")
    return "The server's /v1/models and this file: " + "; ".join(parts) + "."


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
