"""Lesson 1 — What a model is on disk

A GGUF file is a header (the architecture and its hyperparameters, the tokenizer) followed by
tensors: named, shaped arrays of numbers in some storage type. This script reads the header of the
served model without loading any weights, lists every tensor, counts the parameters, adds up the
bytes by storage type and by part of the network (embedding, attention, feed-forward, norms,
output), and computes the work of one decoded token: every weight is read once, about two
floating-point operations are done per weight. Dividing a memory bandwidth by the bytes read per
token gives the bandwidth ceiling, the most tokens per second decode can reach. The bandwidth is
measured on this host (its main memory, read by as many threads as the server decodes with),
optionally given with --bandwidth-gbs, and shown for the course's published example.
"""

from __future__ import annotations

from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from bytesup import formulas, hostbench
from bytesup.errors import BytesupError
from bytesup.gguf_read import _group, read_model_info
from bytesup.runner import LessonContext, script_main

TITLE = "What a model is on disk"

GB = formulas.GB
MiB = 2**20

# Published reference values (course OUTLINE.md, "the specimen model of the published course"):
# deepseek-coder-6.7b-instruct Q8_0 served on a DGX Spark. Only ever shown labelled "published".
PUBLISHED_MODEL = "deepseek-coder-6.7b-instruct Q8_0 (published)"
PUBLISHED_HOST = "DGX Spark (published)"
PUBLISHED_BANDWIDTH_GBS = 273.0  # OUTLINE.md: "about 273 GB/s memory bandwidth"
PUBLISHED_MODEL_BYTES = 7.16e9  # OUTLINE.md: "about 7.16 GB"
PUBLISHED_N_PARAMS = 6.74e9  # OUTLINE.md: "6.74 billion parameters"
PUBLISHED_CEILING_TOKENS_PER_S = 39.0  # OUTLINE.md, lesson 4 figures: "ceiling 39 tokens/s"
PUBLISHED_SHAPE = {  # OUTLINE.md: 32 blocks, width 4,096, 32 heads, feed-forward 11,008, vocabulary 32,256
    "n_layer": 32, "n_embd": 4096, "n_head": 32, "n_ff": 11008, "n_vocab": 32256,
}

GROUPS = ("embedding", "attention", "feed_forward", "norms", "output", "other")


# --- pure helpers (tested on their own) -------------------------------------------------

def shape_text(shape: list[int]) -> str:
    """'256 × 4096': llama.cpp's order, the row length first."""
    return " × ".join(str(n) for n in shape)


def tensor_rows(info: dict) -> list[list[Any]]:
    """name, shape, type, elements, bytes for every tensor, in file order."""
    return [[t["name"], shape_text(t["shape"]), t["type"], t["n_elements"], t["n_bytes"]] for t in info["tensors"]]


def bytes_by_type_rows(info: dict) -> list[list[Any]]:
    """Per storage type: tensors, parameters, bytes, bits per parameter, block layout, share of bytes."""
    total = sum(t["n_bytes"] for t in info["tensors"])
    by_type: dict[str, list[int]] = {}
    for t in info["tensors"]:
        acc = by_type.setdefault(t["type"], [0, 0, 0])
        acc[0] += 1
        acc[1] += t["n_elements"]
        acc[2] += t["n_bytes"]
    rows = []
    for name, (count, params, nbytes) in sorted(by_type.items(), key=lambda kv: -kv[1][2]):
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
        rows.append([name, count, params, nbytes, 8 * nbytes / params, block, block_bytes, 100 * nbytes / total])
    return rows


def _group_of(info: dict) -> dict[str, str]:
    """Tensor name -> part of the network, by gguf_read's one definition of the groups."""
    return {t["name"]: _group(t["name"]) for t in info["tensors"]}


def group_rows(info: dict) -> list[list[Any]]:
    """Per part of the network: tensors, parameters, % of parameters, bytes, % of bytes."""
    groups = _group_of(info)
    n_params = sum(t["n_elements"] for t in info["tensors"])
    total_bytes = sum(t["n_bytes"] for t in info["tensors"])
    acc = {g: [0, 0, 0] for g in GROUPS}
    for t in info["tensors"]:
        a = acc[groups[t["name"]]]
        a[0] += 1
        a[1] += t["n_elements"]
        a[2] += t["n_bytes"]
    return [
        [g.replace("_", "-"), c, p, 100 * p / n_params, b, 100 * b / total_bytes]
        for g, (c, p, b) in acc.items()
        if c or g != "other"
    ]


def hyperparameter_rows(info: dict) -> list[list[Any]]:
    """property, this model, published specimen (where the course states it), GGUF source."""
    hp = info["hyperparameters"]
    arch = info["architecture"]
    rope_note = lambda flag: " (absent: llama.cpp's default)" if hp[flag] else ""  # noqa: E731
    return [
        ["architecture", arch, None, "general.architecture"],
        ["blocks (layers)", hp["n_layer"], PUBLISHED_SHAPE["n_layer"], f"{arch}.block_count"],
        ["model width", hp["n_embd"], PUBLISHED_SHAPE["n_embd"], f"{arch}.embedding_length"],
        ["attention heads", hp["n_head"], PUBLISHED_SHAPE["n_head"], f"{arch}.attention.head_count"],
        ["KV heads", hp["n_head_kv"], None, f"{arch}.attention.head_count_kv"],
        ["head width", hp["head_dim"], None, "model width ÷ heads, or attention.key_length"],
        ["feed-forward width", hp["n_ff"], PUBLISHED_SHAPE["n_ff"], f"{arch}.feed_forward_length"],
        ["vocabulary", hp["n_vocab"], PUBLISHED_SHAPE["n_vocab"], "tokenizer.ggml.tokens (length)"],
        ["context length (training)", hp["n_ctx_train"], None, f"{arch}.context_length"],
        ["RoPE base", hp["rope_freq_base"], None, f"{arch}.rope.freq_base" + rope_note("rope_freq_base_default")],
        ["RoPE dimensions", hp["rope_dimension_count"], None,
         f"{arch}.rope.dimension_count" + rope_note("rope_dimension_count_default")],
        ["file type", (info["file_type"] or {}).get("name"), "Q8_0", "general.file_type"],
        ["file size", info["file_size_bytes"], PUBLISHED_MODEL_BYTES, "bytes on disk"],
        ["GGUF version", info["gguf_version"], None, "header"],
    ]


def ceiling_rows(bytes_per_tok: int, measured_gbs: dict | None, given_gbs: float | None,
                 model_name: str) -> list[list[Any]]:
    """source, model, bandwidth (GB/s), bytes per token, ceiling (tokens/s) = bandwidth ÷ bytes."""
    def row(source: str, model: str, gbs: float, nbytes: float) -> list[Any]:
        return [source, model, gbs, nbytes, formulas.ceiling_tokens_per_s(gbs * GB, nbytes)]

    rows = [row(PUBLISHED_HOST, PUBLISHED_MODEL, PUBLISHED_BANDWIDTH_GBS, PUBLISHED_MODEL_BYTES)]
    if given_gbs is not None:
        rows.append(row("given (--bandwidth-gbs)", model_name, float(given_gbs), bytes_per_tok))
    if measured_gbs is not None:
        for stat in ("median", "min", "max"):
            rows.append(row(f"this host, measured ({stat})", model_name, measured_gbs[stat], bytes_per_tok))
    return rows


def bandwidth_bytes_per_thread(threads: int) -> int:
    """256 MiB per thread, at most 2 GiB in all, never under 64 MiB (well past any cache here)."""
    return max(64 * MiB, min(256 * MiB, 2048 * MiB // max(threads, 1)))


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    # 1. The header: read before anything else, so a bad file fails before any request.
    ctx.step("reading the GGUF header")
    info = ctx.host("model_info", lambda: read_model_info(ctx.require_model()))
    hp = info["hyperparameters"]
    model_name = info.get("name") or ctx.identity.get("model", {}).get("name") or "this model"
    ctx.settings["model_file"] = ctx.identity.get("model", {}).get("file")

    heads_ok = isinstance(hp["head_dim"], int) and hp["head_dim"] * hp["n_head"] == hp["n_embd"]
    ctx.table(
        "architecture", "Architecture and hyperparameters",
        [("property", ""), ("this model", ""), ("published specimen", ""), ("read from", "")],
        hyperparameter_rows(info),
        notes=[
            f"{model_name}: {hp['n_layer']} blocks of width {hp['n_embd']}; "
            f"{hp['n_head']} heads × {hp['head_dim']} = {hp['n_head'] * hp['head_dim']} "
            f"({'equals' if heads_ok else 'differs from'} the model width).",
            f"{hp['n_head']} query heads and {hp['n_head_kv']} KV heads: "
            f"{hp['n_head'] / hp['n_head_kv']:g} query head(s) per KV head."
            if hp["n_head_kv"] else "The file gives no KV head count.",
            f"The feed-forward width is {hp['n_ff'] / hp['n_embd']:.4g} × the model width "
            f"(published specimen: {PUBLISHED_SHAPE['n_ff'] / PUBLISHED_SHAPE['n_embd']:.4g} ×).",
        ],
    )

    # 2. Every tensor.
    rows = tensor_rows(info)
    biggest = max(rows, key=lambda r: r[4])
    per_block = [r for r in rows if r[0].startswith("blk.0.")]
    ctx.table(
        "tensors", "Every tensor in the file",
        [("name", ""), ("shape", "elements"), ("type", ""), ("elements", ""), ("bytes", "")],
        rows,
        notes=[
            f"{len(rows)} tensors: {len(per_block)} in each of the {hp['n_layer']} blocks, "
            f"{len(rows) - len(per_block) * hp['n_layer']} outside them.",
            f"Shapes are in llama.cpp's order, row length first: token_embd is "
            f"{shape_text(next((t['shape'] for t in info['tensors'] if t['name'] == 'token_embd.weight'), []))}, "
            f"one row of width {hp['n_embd']} per vocabulary entry.",
            f"The largest tensor is {biggest[0]} ({biggest[4]:,} bytes, "
            f"{100 * biggest[4] / info['tensor_bytes']:.1f}% of all tensor bytes).",
        ],
    )

    # 3. Parameter count and bytes.
    n_params = sum(r[3] for r in rows)
    bytes_per_tok = formulas.bytes_per_token(info)
    server_meta = _server_meta(ctx)
    overhead = info["file_size_bytes"] - bytes_per_tok
    ctx.table(
        "totals", "Parameters and bytes",
        [("quantity", ""), ("this model", ""), ("server's /v1/models", ""), ("published specimen", "")],
        [
            ["parameters (sum of tensor elements)", n_params, server_meta.get("n_params"), PUBLISHED_N_PARAMS],
            ["tensor bytes", bytes_per_tok, server_meta.get("size"), None],
            ["file size (bytes)", info["file_size_bytes"], None, PUBLISHED_MODEL_BYTES],
            ["header and padding (bytes)", overhead, None, None],
            ["average bits per parameter", 8 * bytes_per_tok / n_params, None, 8 * PUBLISHED_MODEL_BYTES / PUBLISHED_N_PARAMS],
        ],
        notes=[
            f"{n_params:,} parameters ({n_params / 1e6:,.4g} million) in {bytes_per_tok:,} bytes of tensor data.",
            f"The header (metadata, tokenizer, tensor index) and alignment padding take {overhead:,} bytes, "
            f"{100 * overhead / info['file_size_bytes']:.2f}% of the file.",
            _server_agreement(server_meta, n_params, bytes_per_tok),
            f"This model has {n_params / PUBLISHED_N_PARAMS:.3g} × the published specimen's parameters.",
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
    top = max(grows, key=lambda r: r[2])
    ctx.table(
        "parameter_groups", "Where the parameters are",
        [("part", ""), ("tensors", ""), ("parameters", ""), ("share of parameters", "%"), ("bytes", ""),
         ("share of bytes", "%")],
        grows,
        notes=[
            f"The {top[0]} part holds the most parameters: {top[3]:.1f}%.",
            f"Attention and feed-forward together, the {hp['n_layer']} blocks: "
            f"{sum(r[3] for r in grows if r[0] in ('attention', 'feed-forward')):.1f}%; "
            f"embedding and output, the two vocabulary-sized matrices: "
            f"{sum(r[3] for r in grows if r[0] in ('embedding', 'output')):.1f}%.",
        ],
    )

    # 6. The work of one decoded token: every weight read once, ~2 FLOPs per weight.
    flops = formulas.flops_per_token(n_params)
    pub_flops = formulas.flops_per_token(PUBLISHED_N_PARAMS)
    ctx.table(
        "work_per_token", "Work per decoded token",
        [("model", ""), ("parameters", ""), ("bytes read", "bytes"), ("FLOPs", "GFLOP"), ("FLOPs per byte", "")],
        [
            [model_name, n_params, bytes_per_tok, flops / 1e9, flops / bytes_per_tok],
            [PUBLISHED_MODEL, PUBLISHED_N_PARAMS, PUBLISHED_MODEL_BYTES, pub_flops / 1e9, pub_flops / PUBLISHED_MODEL_BYTES],
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
    threads = formulas.server_threads(ctx.identity.get("server", {}).get("flags"))
    bw = ctx.host("read_bandwidth", lambda: hostbench.measure_read_bandwidth(
        threads=threads, bytes_per_thread=bandwidth_bytes_per_thread(threads), repeats=ctx.repeat + 2))
    given = ctx.option("bandwidth_gbs")
    ctx.settings["bandwidth_gbs"] = given
    bw_settings = {"threads": bw["threads"], "bytes_per_thread": bw["bytes_per_thread"]}
    ctx.settings["read_bandwidth"] = bw_settings
    gbs = bw["gb_per_s"]
    ceil_rows = ceiling_rows(bytes_per_tok, gbs, given, model_name)
    published = ceil_rows[0]
    host_median = next(r for r in ceil_rows if r[0].endswith("(median)"))
    embd_bytes = next((t["n_bytes"] for t in info["tensors"] if t["name"] == "token_embd.weight"), 0)
    one_row = embd_bytes // hp["n_vocab"] if hp["n_vocab"] else 0
    strict_bytes = bytes_per_tok - embd_bytes + one_row
    ctx.table(
        "bandwidth_ceiling", "The bandwidth ceiling: tokens/s ≤ bandwidth ÷ bytes per token",
        [("bandwidth source", ""), ("model", ""), ("bandwidth", "GB/s"), ("bytes per token", "bytes"),
         ("ceiling", "tokens/s")],
        ceil_rows,
        notes=[
            f"Published example: {published[2]:g} GB/s ÷ {published[3] / GB:g} GB = {published[4]:.1f} tokens/s "
            f"(the course quotes {PUBLISHED_CEILING_TOKENS_PER_S:g}; computed ÷ quoted = "
            f"{published[4] / PUBLISHED_CEILING_TOKENS_PER_S:.3f}).",
            f"This host read {gbs['median']:.3g} GB/s (median of {len(gbs['samples'])}, "
            f"{gbs['min']:.3g}–{gbs['max']:.3g}) with {bw['threads']} threads over {bw['bytes_per_sample'] / MiB:,.0f} MiB, "
            f"so decoding {model_name} here cannot beat {host_median[4]:,.0f} tokens/s.",
            f"Strictly, decode reads one {one_row:,}-byte row of token_embd per token, not all "
            f"{embd_bytes:,} bytes of it: {strict_bytes:,} bytes per token, a ceiling of "
            f"{formulas.ceiling_tokens_per_s(gbs['median'] * GB, strict_bytes):,.0f} tokens/s at the median "
            f"({100 * embd_bytes / bytes_per_tok:.1f}% of the bytes are the embedding table).",
            f"At that ceiling the arithmetic is {host_median[4] * flops / 1e9:,.0f} GFLOP/s "
            f"({flops / 1e9:.4g} GFLOP per token).",
        ] + [
            f"With the given {r[2]:g} GB/s the ceiling is {r[4]:,.0f} tokens/s, "
            f"{r[4] / host_median[4]:.3g} × this host's measured one."
            for r in ceil_rows if r[0].startswith("given")
        ],
    )
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", gbs["samples"], higher_is_better=None,
                settings=bw_settings, description=bw["method"])
    ctx.measure("decode_ceiling_tokens_per_s_measured_bandwidth", "tokens/s",
                [formulas.ceiling_tokens_per_s(s * GB, bytes_per_tok) for s in gbs["samples"]],
                higher_is_better=None, settings=bw_settings,
                description="each bandwidth sample ÷ bytes per token")
    if given is not None:
        ctx.measure("decode_ceiling_tokens_per_s_given_bandwidth", "tokens/s",
                    [formulas.ceiling_tokens_per_s(float(given) * GB, bytes_per_tok)], higher_is_better=None,
                    settings={"bandwidth_gbs": float(given)}, description="--bandwidth-gbs ÷ bytes per token")
    return ctx.finish()


def _server_meta(ctx: LessonContext) -> dict:
    """The served model's `meta` from /v1/models (n_params, size, n_vocab…), or {} if not served."""
    try:
        data = ctx.server.models().data
    except BytesupError:
        return {}
    meta = data[0].get("meta") if data else None
    return meta if isinstance(meta, dict) else {}


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
    script_main(__file__)
