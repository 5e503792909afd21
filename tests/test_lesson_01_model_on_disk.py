"""Lesson 1 replayed from its recorded run, its arithmetic rechecked, and its table builders on a GGUF built here."""

from __future__ import annotations

import math

import pytest
from lessonkit import run_bandwidth

from bytesup.course import ceiling
from bytesup.course import published
from bytesup.llama.client import LlamaServer
from bytesup.models.gguf import GGUFError, read_model_info
from bytesup.models.catalog import build_model, get_preset
from bytesup.lesson import LessonContext, Reporter
from bytesup.options import RunOptions
from bytesup.store.views import lesson01

LESSON = "01_model_on_disk"


def rows_of(result, name):
    table = result.table(name)
    cols = [c.name for c in table.columns]
    return cols, table.rows


def test_parameter_count_is_the_sum_of_tensor_elements(result):
    _, tensors = rows_of(result, "tensors")
    n_params = sum(r[3] for r in tensors)
    assert result.measurement("n_params").samples == [n_params]
    _, totals = rows_of(result, "totals")
    assert totals[0][1] == n_params
    # Each tensor's element count is the product of its shown shape.
    for name, shape, _type, elements, _bytes in tensors:
        assert math.prod(int(n) for n in shape.split(" × ")) == elements, name
    # The server agrees on the parameter count (recorded /v1/models meta).
    assert totals[0][2] == n_params


def test_bytes_by_type_sum_to_bytes_per_token(result):
    cols, rows = rows_of(result, "bytes_by_type")
    _, tensors = rows_of(result, "tensors")
    bpt = result.measurement("bytes_per_token").samples[0]
    assert sum(r[cols.index("bytes")] for r in rows) == bpt == sum(r[4] for r in tensors)
    assert sum(r[cols.index("tensors")] for r in rows) == len(tensors)
    assert sum(r[-1] for r in rows) == pytest.approx(100)
    for r in rows:  # bits per parameter from the block layout
        assert r[4] == pytest.approx(8 * r[6] / r[5])


def test_parameter_groups_split_the_whole(result):
    cols, rows = rows_of(result, "parameter_groups")
    n_params = result.measurement("n_params").samples[0]
    assert sum(r[cols.index("parameters")] for r in rows) == n_params
    assert sum(r[cols.index("share of parameters")] for r in rows) == pytest.approx(100)
    by_group = result.host_values["model_info"]["params_by_group"]
    assert {r[0]: r[1] for r in rows} == {k.replace("_", "-"): v for k, v in by_group.items() if v or k != "other"}
    parts = {r[0] for r in rows}
    assert {"embedding", "attention", "feed-forward", "norms", "output"} <= parts


def test_every_ceiling_is_bandwidth_over_bytes(result):
    _, rows = rows_of(result, "bandwidth_ceiling")
    assert rows, "no ceiling rows"
    for source, _model, gbs, nbytes, tokens_per_s in rows:
        assert tokens_per_s == pytest.approx(gbs * 1e9 / nbytes), source
    # The published example is computed from the published figures (bytesup.course.published).
    first = rows[0]
    assert first[2] == published.SPARK_BANDWIDTH_GB_PER_S and first[3] == published.SPECIMEN["file_bytes"]
    assert first[4] == pytest.approx(published.SPARK_BANDWIDTH_GB_PER_S * 1e9 / published.SPECIMEN["file_bytes"])
    # The measured rows are the bandwidth measurement's median, min and max.
    bw = result.measurement("read_bandwidth_gb_per_s")
    measured = {r[0]: r[2] for r in rows if r[0].startswith("this host")}
    assert sorted(measured.values()) == sorted([bw.median, bw.min, bw.max])
    bpt = result.measurement("bytes_per_token").samples[0]
    ceiling = result.measurement("decode_ceiling_tokens_per_s_measured_bandwidth")
    assert ceiling.samples == pytest.approx([s * 1e9 / bpt for s in bw.samples])
    reading = run_bandwidth(LESSON, result)  # the run's one reading, shared by lessons 1, 4, 7 and 8
    assert bw.samples == reading["gb_per_s"]["samples"]
    assert bw.higher_is_better is True and bw.unit == "GB/s"
    assert bw.settings == {"threads": reading["threads"]}
    assert len(bw.samples) >= 3
    # The recorded server decodes on this host's CPU, so the host's ceiling is the server's.
    assert result.host_values["server_facts"]["host_bandwidth_applies"] is True
    assert any("cannot beat" in n for n in result.table("bandwidth_ceiling").notes)


def test_a_tied_output_is_read_whole_once_and_counted_once(result):
    info = result.host_values["model_info"]
    assert info["tied_output"]  # SmolLM2: no output.weight, the logits reuse token_embd
    embd = next(t for t in info["tensors"] if t["name"] == "token_embd.weight")
    note = next(n for n in result.table("bandwidth_ceiling").notes if n.startswith("token_embd is also the output matrix"))
    assert f"all {embd['n_bytes']:,} bytes of it" in note
    assert f"({100 * embd['n_bytes'] / info['tensor_bytes']:.1f}% of them)" in note
    assert not any(n.startswith("Strictly") for n in result.table("bandwidth_ceiling").notes)


def test_work_per_token_is_two_flops_per_parameter(result):
    _, rows = rows_of(result, "work_per_token")
    for _model, params, nbytes, gflop, per_byte in rows:
        assert gflop == pytest.approx(2 * params / 1e9)
        assert per_byte == pytest.approx(2 * params / nbytes)


def test_embedding_row_bytes_use_the_tables_own_rows(lesson):
    # A padded table: 4,160 rows for a vocabulary of 4,096; shape is [n_embd, n_rows].
    info = {"tensors": [{"name": "token_embd.weight", "shape": [256, 4160], "n_bytes": 272 * 4160}],
            "hyperparameters": {"n_vocab": 4096}}
    assert lesson.embedding_row_bytes(info) == 272
    assert lesson.embedding_row_bytes({"tensors": []}) is None
    note = lesson01.embedding_shape_note(lesson.token_embd(info), info["hyperparameters"])
    assert "4,160 rows of width 256" in note and "64 more than the vocabulary's 4,096" in note


def test_missing_or_per_layer_hyperparameters_are_said_to_be(lesson):
    hp = {"n_layer": 4, "n_embd": 256, "n_head": [4, 4, 8, 8], "n_head_kv": None, "head_dim": 64, "n_ff": None}
    notes = lesson01.hyperparameter_notes("m", hp)
    text = " ".join(notes)
    assert "per layer: 4–8" in text and "not in the file" in text
    assert "query heads per KV head" not in text and "own keys and values" not in text
    assert lesson01.shown(None) == "not in the file" and lesson01.shown([3, 3]) == "per layer: 3"
    assert lesson01.shown([4, 4, 8, 8]) == "per layer: 4–8" and lesson01.shown([1000, 2000]) == "per layer: 1,000–2,000"
    assert lesson01.shown(["x", 3]) == "a list of 2 values" and lesson01.shown([]) == "a list of 0 values"
    assert lesson01.number(True) is None and lesson01.number(7) == 7
    full = lesson01.hyperparameter_notes("m", {"n_layer": 2, "n_embd": 64, "n_head": 8, "n_head_kv": 2, "head_dim": 8, "n_ff": 176})
    # 8 ÷ 2 = 4 query heads per KV head: the KV cache is 4× smaller than with 8 KV heads.
    assert ("8 query heads share 2 KV heads, 4 query heads per KV head (grouped-query attention): the KV cache "
            "holds 2 keys and values per layer and token instead of 8, 4× less memory (lesson 6).") in full
    mha = lesson01.hyperparameter_notes("m", {"n_layer": 2, "n_embd": 64, "n_head": 8, "n_head_kv": 8, "head_dim": 8, "n_ff": 176})
    assert any("each query head has its own keys and values" in n for n in mha)
    assert "2.75 × the model width" in " ".join(full)


def test_a_file_that_is_not_gguf_fails_before_any_request(tmp_path, lesson):
    bad = tmp_path / "notes.txt"
    bad.write_text("this is not a model\n" * 10)
    server = LlamaServer("http://127.0.0.1:9")  # nothing listens: any request would fail differently
    ctx = LessonContext(LESSON, lesson.TITLE, server=server, run=RunOptions(), model_path=bad,
                        sink=[], replay=None, progress=Reporter(None, LESSON))
    with pytest.raises(GGUFError, match="notes.txt"):
        lesson.main(ctx)
    server.close()



# --- a model made by hand: every number below is worked out in the comments ------------------------

def _tensor(name, shape, type_, n_bytes, group):
    n = 1
    for d in shape:
        n *= d
    return {"name": name, "shape": shape, "type": type_, "n_elements": n, "n_bytes": n_bytes, "group": group}


# Two blocks of width 4, a vocabulary of 10, a separate output matrix; F32 is 4 bytes a value, F16 2.
HAND_TENSORS = [
    _tensor("token_embd.weight", [4, 10], "F32", 160, "embedding"),     # 40 values × 4 bytes
    _tensor("blk.0.attn_q.weight", [4, 4], "F16", 32, "attention"),      # 16 × 2
    _tensor("blk.0.ffn_up.weight", [4, 8], "F16", 64, "feed_forward"),   # 32 × 2
    _tensor("blk.0.attn_norm.weight", [4], "F32", 16, "norms"),          # 4 × 4
    _tensor("blk.1.attn_q.weight", [4, 4], "F16", 32, "attention"),
    _tensor("blk.1.ffn_up.weight", [4, 8], "F16", 64, "feed_forward"),
    _tensor("blk.1.attn_norm.weight", [4], "F32", 16, "norms"),
    _tensor("output.weight", [4, 10], "F16", 80, "output"),              # 40 × 2
    _tensor("output_norm.weight", [4], "F32", 16, "norms"),
]
# Parameters: 40 + 16 + 32 + 4 + 16 + 32 + 4 + 40 + 4 = 188. Tensor bytes: 160 + 32 + 64 + 16 + 32 + 64 + 16 + 80 + 16 = 480.
# The file is 1,000 bytes: 520 of header and padding. Decode reads the 480, never the 1,000.
HAND_INFO = {
    "name": "hand", "architecture": "llama", "file_type": {"name": "MOSTLY_F16", "id": 1}, "gguf_version": 3,
    "file_size_bytes": 1000, "tensor_bytes": 480, "n_params": 188, "tied_output": False, "tensors": HAND_TENSORS,
    "hyperparameters": {"n_layer": 2, "n_embd": 4, "n_head": 2, "n_head_kv": 1, "head_dim": 2, "n_ff": 8, "n_vocab": 10,
                        "n_ctx_train": 64, "rope_freq_base": 10000.0, "rope_dimension_count": 2},
    "bytes_by_type": {"F32": 208, "F16": 272},        # F32: 160 + 16 × 3; F16: 32 + 64 + 32 + 64 + 80
    "params_by_type": {"F32": 52, "F16": 136},        # F32: 40 + 4 × 3; F16: 16 + 32 + 16 + 32 + 40
    "params_by_group": {"embedding": 40, "attention": 32, "feed_forward": 64, "norms": 12, "output": 40, "other": 0},
    "bytes_by_group": {"embedding": 160, "attention": 64, "feed_forward": 128, "norms": 48, "output": 80, "other": 0},
    "tensors_by_group": {"embedding": 1, "attention": 2, "feed_forward": 2, "norms": 3, "output": 1, "other": 0},
}
# 4.8, 9.6 and 7.2 GB/s ÷ 480 bytes per token = 1e7, 2e7 and 1.5e7 tokens/s; the median is 1.5e7.
HAND_BW = {"gb_per_s": {"samples": [4.8, 9.6, 7.2], "median": 7.2, "min": 4.8, "max": 9.6},
           "threads": 2, "bytes_per_thread": 2**28, "bytes_per_sample": 2**29, "method": "np.add.reduce over 2 threads"}
HAND_LOCAL = {"host_bandwidth_applies": True, "reason": "the server decodes on this host's CPU, from this host's memory"}
HAND_REMOTE = {"host_bandwidth_applies": False, "reason": "the server runs on gpu-box, not on this host"}


def test_hand_model_tensors_types_and_groups(lesson):
    tensors = lesson.tensor_entries(HAND_INFO)
    assert [t.shape for t in tensors[:2]] == ["4 × 10", "4 × 4"]
    assert sum(t.elements for t in tensors) == 188 and sum(t.bytes for t in tensors) == 480
    shares = {s.type: s for s in lesson.type_shares(HAND_INFO)}
    # F32: 4 tensors, 52 values, 208 bytes: 8 × 208 ÷ 52 = 32 bits each, 208 ÷ 480 = 43.33% of the bytes.
    assert (shares["F32"].tensors, shares["F32"].params, shares["F32"].bytes) == (4, 52, 208)
    assert shares["F32"].bits_per_param == 32.0 and shares["F32"].share_percent == pytest.approx(43.3333, abs=1e-4)
    # F16: 5 tensors, 136 values, 272 bytes: 16 bits each, 56.67%.
    assert (shares["F16"].tensors, shares["F16"].bits_per_param, shares["F16"].block_elements, shares["F16"].block_bytes) == (5, 16.0, 1, 2)
    assert shares["F16"].share_percent == pytest.approx(56.6667, abs=1e-4)
    groups = {g.part: g for g in lesson.group_shares(HAND_INFO)}
    assert list(groups) == ["embedding", "attention", "feed-forward", "norms", "output"]  # no "other": it is empty
    # feed-forward: 64 of 188 parameters = 34.04%, 128 of 480 bytes = 26.67%, 2 tensors.
    ff = groups["feed-forward"]
    assert (ff.params, ff.tensors, ff.bytes) == (64, 2, 128)
    assert ff.params_percent == pytest.approx(34.0426, abs=1e-4) and ff.bytes_percent == pytest.approx(26.6667, abs=1e-4)
    assert lesson.block_counts(HAND_INFO) == {0: 3, 1: 3}
    assert lesson.embedding_row_bytes(HAND_INFO) == 16  # 160 bytes ÷ 10 rows


def test_groups_absent_from_the_counts_are_zero(lesson):
    # Without "norms" and "other" in the counts: norms listed with 0 parameters, 0 tensors, 0 bytes
    # (0 ÷ 188 = 0%); "other" left out. The rest as above: output 40 of 188 = 21.28%, 80 of 480 = 16.67%.
    info = {**HAND_INFO, **{key: {g: n for g, n in HAND_INFO[key].items() if g not in ("norms", "other")}
                            for key in ("params_by_group", "bytes_by_group", "tensors_by_group")}}
    groups = {g.part: g for g in lesson.group_shares(info)}
    assert list(groups) == ["embedding", "attention", "feed-forward", "norms", "output"]
    norms = groups["norms"]
    assert (norms.params, norms.params_percent, norms.tensors, norms.bytes, norms.bytes_percent) == (0, 0.0, 0, 0, 0.0)
    assert groups["output"].params_percent == pytest.approx(21.2766, abs=1e-4)
    assert groups["output"].bytes_percent == pytest.approx(16.6667, abs=1e-4)


def test_block_counts_only_names_blk_n_something(lesson):
    # blk.0.x and blk.0.attn_q.weight: 2 in block 0; "blk.3" names no tensor of a block, "blk.x.y" no number.
    names = ["blk.3", "blk.0.x", "blk.0.attn_q.weight", "blk.x.y", "output.weight", "block.1.x"]
    assert lesson.block_counts({"tensors": [{"name": n} for n in names]}) == {0: 2}


def test_hand_model_totals_and_work(lesson):
    tot = lesson.totals(HAND_INFO)
    # The bytes read per token are the tensors' 480, not the file's 1,000; 8 × 480 ÷ 188 = 20.43 bits per parameter.
    assert (tot.n_params, tot.tensor_bytes, tot.file_bytes, tot.overhead_bytes) == (188, 480, 1000, 520)
    assert tot.bits_per_param == pytest.approx(20.4255, abs=1e-4)
    work = ceiling.token_work(188, 480)
    # 2 × 188 = 376 FLOPs; 376 ÷ 480 = 0.7833 FLOPs per byte.
    assert (work.flops, work.flops_per_byte) == (376.0, pytest.approx(0.78333, abs=1e-5))
    # Strictly one 16-byte row of token_embd per token: 480 − 160 + 16 = 336 bytes; 7.2e9 ÷ 336 = 21,428,571 tokens/s.
    strict = lesson.strict_bytes(480, 160, 16, 7.2)
    assert strict.bytes_per_token == 336 and strict.tokens_per_s == pytest.approx(21_428_571.43, abs=0.01)


def _run_hand(lesson, facts, given=None):
    from lessonkit import QueuedServer, hand_context

    server = QueuedServer({"/v1/models": [{"data": [{"id": "hand.gguf", "meta": {"n_params": 188, "size": 480}}]}]})
    ctx = hand_context(LESSON, server, bandwidth=HAND_BW,
                       host_values={"model_info": HAND_INFO, "server_facts": facts, "option_bandwidth_gbs": given})
    result = lesson.main(ctx)
    assert server.left() == {}
    return result


def test_main_on_a_hand_made_model_decoding_on_this_cpu(lesson):
    result = _run_hand(lesson, HAND_LOCAL)
    assert result.measurement("n_params").samples == [188]
    assert result.measurement("bytes_per_token").samples == [480]
    assert result.measurement("read_bandwidth_gb_per_s").samples == [4.8, 9.6, 7.2]
    ceiling = result.measurement("decode_ceiling_tokens_per_s_measured_bandwidth")
    assert ceiling.samples == pytest.approx([1e7, 2e7, 1.5e7])  # 4.8e9, 9.6e9, 7.2e9 ÷ 480
    rows = {r[0]: r for r in result.table("bandwidth_ceiling").rows}
    # The published example: 273 GB/s ÷ 7.16e9 bytes = 38.13 tokens/s.
    assert rows["DGX Spark (published)"][4] == pytest.approx(38.128, abs=1e-3)
    assert rows["this host, measured (median)"][2:] == [7.2, 480, pytest.approx(1.5e7)]
    assert rows["this host, measured (min)"][4] == pytest.approx(1e7)
    assert rows["this host, measured (max)"][4] == pytest.approx(2e7)
    notes = result.table("bandwidth_ceiling").notes
    assert "cannot beat 15,000,000 tokens/s" in notes[1]
    # Strictly 480 − 160 + 16 = 336 bytes per token: 7.2e9 ÷ 336 = 21,428,571 tokens/s.
    assert any("336 bytes per token, a ceiling of 21,428,571 tokens/s at this host's median" in n for n in notes)
    # 1.5e7 tokens/s × 376 FLOPs = 5.64 GFLOP/s.
    assert notes[-1] == ("At this host's median ceiling of 15,000,000 tokens/s the arithmetic is 5.64 GFLOP/s "
                         "(3.76e-07 GFLOP per token).")
    totals = {r[0]: r for r in result.table("totals").rows}
    assert totals["tensor bytes"][1:3] == [480, 480] and totals["header and padding (bytes)"][1] == 520
    assert "parameters agree; tensor bytes agree" in result.table("totals").notes[2]
    work = result.table("work_per_token").rows[0]
    assert work[1:] == [188, 480, pytest.approx(3.76e-7), pytest.approx(0.78333, abs=1e-5)]
    groups = {r[0]: r for r in result.table("parameter_groups").rows}
    assert groups["attention"][2] == pytest.approx(17.0213, abs=1e-4)  # 32 ÷ 188
    # attention + feed-forward: 96 ÷ 188 = 51.1%; embedding + output: 80 ÷ 188 = 42.6%.
    assert "the 2 blocks: 51.1%; embedding and output, the vocabulary-sized matrices: 42.6%." in result.table("parameter_groups").notes[1]
    main, full = result.table("tensors_first_block"), result.table("tensors")
    assert main.notes[0] == "9 tensors: 3 in each of the 2 blocks, 3 outside them. All 9 are listed under Details."
    # the main text lists the 3 tensors outside the blocks and block 0's 3; every one of the 9 is under Details
    assert [r[0] for r in main.rows] == [r[0] for r in full.rows if not r[0].startswith("blk.1.")] and len(full.rows) == 9
    assert not main.detail and full.detail and full.notes == []
    # What the run shows: 188 parameters in 480 bytes (8 × 480 ÷ 188 = 20.4 bits each); 7.2 GB/s ÷ 480 bytes = 15,000,000.
    assert result.shows is not None and result.shows.plot == "bandwidth_ceiling"
    # Its plot: the line bandwidth ÷ 480 bytes from half the lowest mark (3.6 GB/s) to twice the highest (546 GB/s),
    # this host at 7.2 GB/s (4.8–9.6), DGX Spark's 273 GB/s on the same line
    line, host, spark = result.plots[0].series
    assert line.x == [3.6, 546.0] and line.y == pytest.approx([3.6e9 / 480, 546e9 / 480])
    assert (host.x, host.y, host.y_min, host.y_max) == ([7.2], [pytest.approx(1.5e7)], [pytest.approx(1e7)], [pytest.approx(2e7)])
    assert spark.x == [273.0] and spark.y == [pytest.approx(273e9 / 480)] and spark.y_min is None
    assert result.shows.text == (
        "hand holds 188 parameters in 480 bytes of tensors (20.4 bits per parameter), and decoding one token reads every "
        "one of those bytes. This host's memory reads 7.2 GB/s (the median of 3 samples), and the server decodes on "
        "this CPU, so it cannot decode faster than 15,000,000 tokens/s.")
    assert result.settings == {"model_file": None, "bandwidth_gbs": None,
                               "read_bandwidth": {"threads": 2, "bytes_per_thread": 2**28}}


def test_main_with_a_given_bandwidth_on_a_remote_server(lesson):
    result = _run_hand(lesson, HAND_REMOTE, given=48.0)
    names = [m.name for m in result.measurements]
    assert "decode_ceiling_tokens_per_s_measured_bandwidth" not in names
    assert result.measurement("host_cpu_decode_ceiling_tokens_per_s").samples == pytest.approx([1e7, 2e7, 1.5e7])
    given = result.measurement("decode_ceiling_tokens_per_s_given_bandwidth")
    assert given.samples == [pytest.approx(1e8)] and given.settings == {"bandwidth_gbs": 48.0}  # 48e9 ÷ 480
    rows = {r[0]: r for r in result.table("bandwidth_ceiling").rows}
    assert rows["given (--bandwidth-gbs)"][2:] == [48.0, 480, pytest.approx(1e8)]
    assert "this host, measured (median, CPU decode here, not the server)" in rows
    notes = result.table("bandwidth_ceiling").notes
    assert not any("cannot beat 15,000,000" in n for n in notes)
    assert "not for the server, because the server runs on gpu-box" in notes[1]
    # 1e8 ÷ 1.5e7 = 6.67 × the host's CPU ceiling; strictly 48e9 ÷ 336 = 142,857,143 tokens/s; 1e8 × 376 = 37.6 GFLOP/s.
    assert "cannot beat 100,000,000 tokens/s, 6.67 × this host's measured CPU ceiling." in notes[2]
    assert "a ceiling of 142,857,143 tokens/s at the given bandwidth" in notes[3]
    assert notes[4].startswith("At the given bandwidth ceiling of 100,000,000 tokens/s the arithmetic is 37.6 GFLOP/s")
    # The same bytes on a server elsewhere: the host's ceiling is said not to bound it, and 48 GB/s ÷ 480 bytes is.
    shows = result.shows.text if result.shows else ""
    assert "cannot decode faster" not in shows
    assert ("This host's memory reads 7.2 GB/s, a ceiling of 15,000,000 tokens/s for decoding on this CPU, which "
            "does not bound the server: the server runs on gpu-box") in shows
    assert shows.endswith(" At the given 48 GB/s the ceiling is 100,000,000 tokens/s.")


def test_main_on_a_tied_model_counts_the_embedding_once(lesson):
    from lessonkit import QueuedServer, hand_context

    tied = {**HAND_INFO, "tied_output": True}
    server = QueuedServer({"/v1/models": [{"data": []}]})
    ctx = hand_context(LESSON, server, bandwidth=HAND_BW,
                       host_values={"model_info": tied, "server_facts": HAND_LOCAL, "option_bandwidth_gbs": None})
    notes = lesson.main(ctx).table("bandwidth_ceiling").notes
    # token_embd's 160 bytes are 160 ÷ 480 = 33.3% of the bytes per token.
    assert any("all 160 bytes of it" in n and "(33.3% of them)" in n for n in notes)
    assert not any(n.startswith("Strictly") for n in notes)


def test_lesson_functions_on_a_model_built_here(tmp_path, lesson):
    preset = get_preset("tiny-q8_0")
    info = read_model_info(build_model(preset, tmp_path / "m.gguf"))
    # Naive sums over the file's tensor index, against the preset's own counts.
    elements = bytes_ = 0
    for t in info["tensors"]:
        elements += math.prod(t["shape"])
        bytes_ += t["n_bytes"]
    assert elements == preset.n_params == sum(t.elements for t in lesson.tensor_entries(info))
    assert bytes_ == preset.tensor_bytes == lesson.totals(info).tensor_bytes
    assert sum(s.bytes for s in lesson.type_shares(info)) == preset.tensor_bytes
    groups = {g.part: g for g in lesson.group_shares(info)}
    assert groups["embedding"].params == groups["output"].params == preset.n_vocab * preset.n_embd
    assert sum(g.tensors for g in groups.values()) == len(info["tensors"])
    hp = {r.name: r.this_model for r in lesson01.hyperparameter_rows(info)}
    assert (hp["blocks (layers)"], hp["model width"], hp["feed-forward width"]) == (preset.n_layer, preset.n_embd, preset.n_ff)
