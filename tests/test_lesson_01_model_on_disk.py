"""Lesson 1 replayed from its recorded run, its arithmetic rechecked, and its table builders on a GGUF built here."""

from __future__ import annotations

import math

import pytest
from lessonkit import replay

from bytesup import formulas
from bytesup.gguf_read import GGUFError, read_model_info
from bytesup.models import build_model, get_preset
from bytesup.client import LlamaServer
from bytesup.runner import LessonContext, Reporter, RunOptions, load_lesson

LESSON = "01_model_on_disk"


@pytest.fixture(scope="module")
def lesson():
    return load_lesson(LESSON)


@pytest.fixture
def result(tmp_path):
    return replay(LESSON, tmp_path)


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
    assert sum(r[3] for r in rows) == pytest.approx(100)
    assert sum(r[5] for r in rows) == pytest.approx(100)
    assert sum(r[1] for r in rows) == len(result.table("tensors").rows)
    parts = {r[0] for r in rows}
    assert {"embedding", "attention", "feed-forward", "norms", "output"} <= parts


def test_every_ceiling_is_bandwidth_over_bytes(result):
    _, rows = rows_of(result, "bandwidth_ceiling")
    assert rows, "no ceiling rows"
    for source, _model, gbs, nbytes, ceiling in rows:
        assert ceiling == pytest.approx(gbs * 1e9 / nbytes), source
    # The published example is computed from the published constants: 273 GB/s over 7.16 GB.
    published = rows[0]
    assert published[4] == pytest.approx(273 / 7.16)
    # The measured rows are the bandwidth measurement's median, min and max.
    bw = result.measurement("read_bandwidth_gb_per_s")
    measured = {r[0]: r[2] for r in rows if r[0].startswith("this host")}
    assert sorted(measured.values()) == sorted([bw.median, bw.min, bw.max])
    bpt = result.measurement("bytes_per_token").samples[0]
    ceiling = result.measurement("decode_ceiling_tokens_per_s_measured_bandwidth")
    assert ceiling.samples == pytest.approx([s * 1e9 / bpt for s in bw.samples])
    assert bw.samples == result.host_values["read_bandwidth"]["gb_per_s"]["samples"]
    assert len(bw.samples) >= 2


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
    groups = {r[0]: r[2] for r in lesson.group_rows(info)}
    assert groups == {k.replace("_", "-"): v for k, v in info["params_by_group"].items() if v or k != "other"}
    assert groups["embedding"] == groups["output"] == preset.n_vocab * preset.n_embd
    hp = {r[0]: r[1] for r in lesson.hyperparameter_rows(info)}
    assert (hp["blocks (layers)"], hp["model width"], hp["feed-forward width"]) == (preset.n_layer, preset.n_embd, preset.n_ff)


def test_ceiling_rows_with_a_given_bandwidth(lesson):
    rows = lesson.ceiling_rows(1_000_000, {"median": 20.0, "min": 10.0, "max": 30.0}, 50.0, "m")
    by_source = {r[0]: r[4] for r in rows}
    assert by_source["given (--bandwidth-gbs)"] == pytest.approx(50_000)
    assert by_source["this host, measured (min)"] == pytest.approx(10_000)
    assert len(lesson.ceiling_rows(1_000_000, None, None, "m")) == 1  # only the published example


def test_a_file_that_is_not_gguf_fails_before_any_request(tmp_path, lesson):
    bad = tmp_path / "notes.txt"
    bad.write_text("this is not a model\n" * 10)
    server = LlamaServer("http://127.0.0.1:9")  # nothing listens: any request would fail differently
    ctx = LessonContext(LESSON, lesson.TITLE, server=server, options=RunOptions(), model_path=bad,
                        sink=[], replay=None, progress=Reporter(None, LESSON))
    with pytest.raises(GGUFError, match="notes.txt"):
        lesson.main(ctx)
    server.close()


def test_bandwidth_buffer_stays_within_bounds(lesson):
    for threads in (1, 2, 16, 72, 256):
        per = lesson.bandwidth_bytes_per_thread(threads)
        assert 64 * 2**20 <= per <= 256 * 2**20
        assert per * threads <= max(2048 * 2**20, 64 * 2**20 * threads)
