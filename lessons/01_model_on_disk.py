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

Its parts: `main` below, in the order of the lesson; the requests (the file's header, the server's meta, the run's
bandwidth reading); the arithmetic (this file's computation section and `bytesup.course.ceiling`); the view, its
records, tables and notes (`bytesup.store.views.lesson01`). It has no plan of its own: every run asks the same.
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
from bytesup.course.ceiling import Ceiling, token_work
from bytesup.lesson import LessonContext
from bytesup.models.gguf import read_model_info
from bytesup.options import BandwidthGbs, LessonOptions
from bytesup.store.views import lesson01
from bytesup.store.views.lesson01 import GroupShare, StrictBytes, TensorEntry, Totals, TypeShare

TITLE = "What a model is on disk"
# Nothing here is timed on a server (it reads the file and this host's memory):
# a run reads the machine's pace (bytesup.run.pace) around the other lessons alone.
TIMES_THE_SERVER = False
GROUPS = ("embedding", "attention", "feed_forward", "norms", "output", "other")


class Options(LessonOptions):
    """This lesson's options (`ctx.options`): a bandwidth of your own for the decode ceiling."""

    bandwidth_gbs: BandwidthGbs = None


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    # 1. The header: hyperparameters, read before any request.
    ctx.step("reading the GGUF header")
    info = read_header(ctx)
    model_name = info.get("name") or ctx.identity.get("model", {}).get("name") or "this model"
    ctx.settings["model_file"] = ctx.identity.get("model", {}).get("file")
    ctx.tables.append(lesson01.architecture(info, model_name))

    # 2. Every tensor: name, shape, type, elements, bytes.
    ctx.tables += lesson01.tensors(info, tensor_entries(info), block_counts(info), token_embd(info))

    # 3. Parameter count and bytes, beside the server's own /v1/models meta.
    tot = totals(info)
    ctx.tables.append(lesson01.totals(tot, ctx.server.served_meta()))
    ctx.measure("n_params", "parameters", [tot.n_params], higher_is_better=None,
                description="sum of the elements of every tensor in the GGUF")

    # 4. Bytes by storage type; 5. where the parameters are.
    ctx.tables.append(lesson01.bytes_by_type(type_shares(info)))
    n_blocks = len(block_counts(info)) or lesson01.shown(info["hyperparameters"].get("n_layer"))
    ctx.tables.append(lesson01.parameter_groups(group_shares(info), n_blocks))

    # 6. The work of one decoded token: every weight read once, ~2 FLOPs per weight.
    work = token_work(tot.n_params, tot.tensor_bytes)
    specimen = token_work(lesson01.SPECIMEN["n_params"], lesson01.SPECIMEN["file_bytes"])
    ctx.tables.append(lesson01.work_per_token(model_name, work, specimen))
    ctx.measure("bytes_per_token", "bytes", [tot.tensor_bytes], higher_is_better=None,
                description="bytes of weights read per decoded token (every tensor once)")

    # 7. The bandwidth ceiling: bandwidth ÷ bytes per token (bytesup.course.ceiling).
    ctx.step("measuring this host's memory read bandwidth")
    inputs = bandwidth_inputs(ctx)
    ctx.settings["bandwidth_gbs"] = inputs.given_gbs
    ctx.settings["read_bandwidth"] = {"threads": inputs.reading["threads"], "bytes_per_thread": inputs.reading["bytes_per_thread"]}
    ceil = ceiling.bandwidth_ceiling(tot.tensor_bytes, inputs.reading["gb_per_s"]["samples"],
                                     host_applies=bool(inputs.facts["host_bandwidth_applies"]), given_gbs=inputs.given_gbs)
    tied = tied_embedding_bytes(info)
    ctx.tables.append(lesson01.bandwidth_ceiling(model_name, inputs.reading, inputs.facts.get("reason"), ceil, work,
                                             None if tied else strict_bytes_of(info, ceil), tied))
    measure_ceiling(ctx, inputs, ceil)

    ctx.plots.append(lesson01.ceiling_plot(model_name, ceil))

    # What this run shows: the bytes of a token and the ceiling they give, first on the page with the ceiling's plot.
    ctx.shows(lesson01.shows(model_name, tot, ceil, inputs.facts.get("reason")), plot="bandwidth_ceiling")
    return ctx.finish()


# --- requests: the model file, the server's meta, the run's bandwidth ----------------------------

def read_header(ctx: LessonContext) -> dict[str, Any]:
    """The served model's GGUF header and tensor index (gguf.read_model_info), a host value:
    read before anything else, so a bad file fails before any request."""
    return ctx.host("model_info", lambda: read_model_info(ctx.require_model()))


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

def tensor_entries(info: dict) -> list[TensorEntry]:
    """Every tensor, in file order."""
    return [TensorEntry(t["name"], lesson01.shape_text(t["shape"]), t["type"], t["n_elements"], t["n_bytes"])
            for t in info["tensors"]]


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


def totals(info: dict) -> Totals:
    n_params, tensor_bytes = info["n_params"], formulas.bytes_per_token(info)
    return Totals(n_params, tensor_bytes, info["file_size_bytes"], info["file_size_bytes"] - tensor_bytes,
                  8 * tensor_bytes / n_params)


def tied_embedding_bytes(info: dict) -> int | None:
    """token_embd's bytes where it is also the output matrix (tied embeddings): decode reads it whole once a token."""
    embd = token_embd(info)
    return embd["n_bytes"] if info.get("tied_output") and embd is not None and embd["n_bytes"] > 0 else None


def strict_bytes(bytes_per_token: float, embd_bytes: int, row_bytes: int, ref_gbs: float) -> StrictBytes:
    strict = bytes_per_token - embd_bytes + row_bytes
    return StrictBytes(row_bytes, embd_bytes, strict, ceiling.ceiling_at(ref_gbs, strict))


def strict_bytes_of(info: dict, ceil: Ceiling) -> StrictBytes | None:
    """With a separate output matrix: decode's bytes counting one row of token_embd, at the reference bandwidth."""
    embd, row_bytes = token_embd(info), embedding_row_bytes(info)
    if embd is None or not embd["n_bytes"] or row_bytes is None:
        return None
    return strict_bytes(ceil.bytes_per_token, embd["n_bytes"], row_bytes, lesson01.reference_bandwidth(ceil)[0])


# --- what the lesson records: the bandwidth and the ceilings it gives ------------------------------

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


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
