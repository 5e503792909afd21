"""Lesson 1 replayed from its recorded run, its arithmetic rechecked, and its table builders on a GGUF built here."""

from __future__ import annotations

import math

import pytest
from lessonkit import run_bandwidth

from bytesup import formulas, published
from bytesup.client import LlamaServer
from bytesup.gguf_read import GGUFError, read_model_info
from bytesup.models import build_model, get_preset
from bytesup.runner import LessonContext, Reporter, RunOptions

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
    for source, _model, gbs, nbytes, ceiling in rows:
        assert ceiling == pytest.approx(gbs * 1e9 / nbytes), source
    # The published example is computed from the published figures (bytesup.published).
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


def test_strict_note_uses_one_row_of_token_embd_when_the_output_is_separate(lesson):
    # A model with its own output.weight: 1,000 rows of 64 bytes in token_embd, 200,000 bytes in all.
    bw = {"gb_per_s": {"median": 10.0, "min": 9.0, "max": 11.0, "samples": [9.0, 10.0, 11.0]},
          "threads": 2, "bytes_per_sample": 2**28}
    facts = {"host_bandwidth_applies": True, "reason": "the server decodes on this CPU"}
    notes = lesson.ceiling_notes(model_name="m", bw=bw, bytes_per_tok=200_000, flops=1e6, given=None, facts=facts,
                                 row_bytes=64, embd_bytes=64_000, tied=False)
    strict = next(n for n in notes if n.startswith("Strictly"))
    # 200,000 − 64,000 + 64 = 136,064 bytes; 1e10 ÷ 136,064 = 73,494.8 tokens/s; 64,000 ÷ 200,000 = 32.0%.
    assert "one 64-byte row" in strict and "136,064 bytes per token" in strict
    assert "73,495 tokens/s" in strict and "(32.0% of the bytes are the embedding table)" in strict
    tied = lesson.ceiling_notes(model_name="m", bw=bw, bytes_per_tok=200_000, flops=1e6, given=None, facts=facts,
                                row_bytes=64, embd_bytes=64_000, tied=True)
    assert not any(n.startswith("Strictly") for n in tied)


def test_work_per_token_is_two_flops_per_parameter(result):
    _, rows = rows_of(result, "work_per_token")
    for _model, params, nbytes, gflop, per_byte in rows:
        assert gflop == pytest.approx(2 * params / 1e9)
        assert per_byte == pytest.approx(2 * params / nbytes)


def test_table_builders_on_a_model_built_here(tmp_path, lesson):
    preset = get_preset("tiny-q8_0")
    info = read_model_info(build_model(preset, tmp_path / "m.gguf"))
    rows = lesson.tensor_rows(info)
    assert sum(r[3] for r in rows) == preset.n_params
    assert sum(r[3] for r in rows) == info["n_params"]
    assert sum(r[3] for r in lesson.bytes_by_type_rows(info)) == preset.tensor_bytes == formulas.bytes_per_token(info)
    groups = {r[0]: r[1] for r in lesson.group_rows(info)}
    assert groups == {k.replace("_", "-"): v for k, v in info["params_by_group"].items() if v or k != "other"}
    assert groups["embedding"] == groups["output"] == preset.n_vocab * preset.n_embd
    grows = lesson.group_rows(info)
    assert sum(r[4] for r in grows) == preset.tensor_bytes  # bytes by part add up to every tensor's bytes
    assert sum(r[3] for r in grows) == len(info["tensors"])
    assert sum(r[5] for r in grows) == pytest.approx(100)
    hp = {r[0]: r[1] for r in lesson.hyperparameter_rows(info)}
    assert (hp["blocks (layers)"], hp["model width"], hp["feed-forward width"]) == (preset.n_layer, preset.n_embd, preset.n_ff)


def test_ceiling_rows_with_a_given_bandwidth(lesson):
    rows = lesson.ceiling_rows(1_000_000, {"median": 20.0, "min": 10.0, "max": 30.0}, 50.0, "m")
    by_source = {r[0]: r[4] for r in rows}
    assert by_source["given (--bandwidth-gbs)"] == pytest.approx(50_000)
    assert by_source["this host, measured (min)"] == pytest.approx(10_000)
    assert len(lesson.ceiling_rows(1_000_000, None, None, "m")) == 1  # only the published example
    remote = lesson.ceiling_rows(1_000_000, {"median": 20.0, "min": 10.0, "max": 30.0}, None, "m", host_applies=False)
    host = [r[0] for r in remote if r[0].startswith("this host")]
    assert len(host) == 3 and all("not the server" in label for label in host)


BW = {"threads": 2, "bytes_per_sample": 2**29, "gb_per_s": {"samples": [9.0, 10.0, 11.0], "median": 10.0, "min": 9.0, "max": 11.0}}
LOCAL = {"host_bandwidth_applies": True, "reason": "the server decodes on this host's CPU, from this host's memory"}
REMOTE = {"host_bandwidth_applies": False, "reason": "the server runs on gpu-box, not on this host"}


def _notes(lesson, facts, given=None):
    return lesson.ceiling_notes(model_name="m", bw=BW, bytes_per_tok=1_000_000, flops=2e6, given=given, facts=facts,
                                row_bytes=100, embd_bytes=10_000)


def test_ceiling_notes_claim_a_server_bound_only_where_it_applies(lesson):
    local = _notes(lesson, LOCAL)
    assert "cannot beat 10,000 tokens/s" in local[0]
    remote = _notes(lesson, REMOTE)
    assert not any("cannot beat" in n for n in remote)
    assert "not for the server" in remote[0] and REMOTE["reason"] in remote[0]
    assert any("--bandwidth-gbs" in n for n in remote)
    assert "this host's CPU median" in remote[-1]
    given = _notes(lesson, REMOTE, given=50.0)
    assert any("cannot beat 50,000 tokens/s" in n for n in given)
    # With a given bandwidth the strict and arithmetic sentences use it, not this host's CPU.
    strict = next(n for n in given if n.startswith("Strictly"))
    assert f"{50e9 / (1_000_000 - 10_000 + 100):,.0f} tokens/s at the given bandwidth" in strict
    assert "the given bandwidth ceiling of 50,000 tokens/s" in given[-1]


def test_embedding_row_bytes_use_the_tables_own_rows(lesson):
    # A padded table: 4,160 rows for a vocabulary of 4,096; shape is [n_embd, n_rows].
    info = {"tensors": [{"name": "token_embd.weight", "shape": [256, 4160], "n_bytes": 272 * 4160}],
            "hyperparameters": {"n_vocab": 4096}}
    assert lesson.embedding_row_bytes(info) == 272
    assert lesson.embedding_row_bytes({"tensors": []}) is None
    note = lesson._embedding_shape_note(lesson.token_embd(info), info["hyperparameters"])
    assert "4,160 rows of width 256" in note and "64 more than the vocabulary's 4,096" in note


def test_missing_or_per_layer_hyperparameters_are_said_to_be(lesson):
    hp = {"n_layer": 4, "n_embd": 256, "n_head": [4, 4, 8, 8], "n_head_kv": None, "head_dim": 64, "n_ff": None}
    notes = lesson.hyperparameter_notes("m", hp)
    text = " ".join(notes)
    assert "per layer: 4–8" in text and "not in the file" in text
    assert "query heads per KV head" not in text and "own keys and values" not in text
    assert lesson.shown(None) == "not in the file" and lesson.shown([3, 3]) == "per layer: 3"
    assert lesson.number(True) is None and lesson.number(7) == 7
    full = lesson.hyperparameter_notes("m", {"n_layer": 2, "n_embd": 64, "n_head": 8, "n_head_kv": 2, "head_dim": 8, "n_ff": 176})
    # 8 ÷ 2 = 4 query heads per KV head: the KV cache is 4× smaller than with 8 KV heads.
    assert ("8 query heads share 2 KV heads, 4 query heads per KV head (grouped-query attention): the KV cache "
            "holds 2 keys and values per layer and token instead of 8, 4× less memory (lesson 6).") in full
    mha = lesson.hyperparameter_notes("m", {"n_layer": 2, "n_embd": 64, "n_head": 8, "n_head_kv": 8, "head_dim": 8, "n_ff": 176})
    assert any("each query head has its own keys and values" in n for n in mha)
    assert "2.75 × the model width" in " ".join(full)


def test_a_file_that_is_not_gguf_fails_before_any_request(tmp_path, lesson):
    bad = tmp_path / "notes.txt"
    bad.write_text("this is not a model\n" * 10)
    server = LlamaServer("http://127.0.0.1:9")  # nothing listens: any request would fail differently
    ctx = LessonContext(LESSON, lesson.TITLE, server=server, options=RunOptions(), model_path=bad,
                        sink=[], replay=None, progress=Reporter(None, LESSON))
    with pytest.raises(GGUFError, match="notes.txt"):
        lesson.main(ctx)
    server.close()

