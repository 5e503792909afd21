"""Lesson 8: the sweep table, the verdicts and the fit recomputed from the recorded run, and the
pure helpers on hand-made data."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from lessonkit import recorded_exchanges

from bytesup import published, sweep
from bytesup.errors import BytesupError
from bytesup.records import Timings, decode_tokens_per_s

LESSON = "08_capstone_decode_memory_bound"


def col(table, name: str) -> int:
    return [c.name for c in table.columns].index(name)


def measured_rows(result):
    return [r for r in result.table("sweep").rows if "published" not in r[0]]


def test_sweep_rows_recomputed(result):
    t = result.table("sweep")
    for row in measured_rows(result):
        b = row[col(t, "bytes per token")]
        m = next(x for x in result.measurements if x.name == "decode_tokens_per_s" and x.settings["preset"] == row[0])
        assert row[col(t, "decode")] == pytest.approx(m.median)
        assert row[col(t, "effective")] == pytest.approx(m.median * b / 1e9)
        assert row[col(t, "effective min")] == pytest.approx(m.min * b / 1e9)
        bw = result.measurement("read_bandwidth_gb_per_s").median
        assert row[col(t, "efficiency")] == pytest.approx(100 * m.median * b / 1e9 / bw)


def test_measurements_match_responses(result):
    speeds = defaultdict(list)
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/completion" and "n_probs" not in e["request"]:
            assert e["request"]["temperature"] == 0 and e["request"]["cache_prompt"] is False
            speeds[e["server"].removeprefix("preset-")].append(decode_tokens_per_s(Timings(**e["response"]["timings"])))
    for m in result.measurements:
        if m.name == "decode_tokens_per_s":
            assert m.samples == pytest.approx(speeds[m.settings["preset"]])


def test_verdicts_follow_the_rules(result, lesson):
    """The verdict column is sweep.analyse of the recorded points, nothing else."""
    t = result.table("sweep")
    rows = measured_rows(result)
    llc = {r[0]: r[col(t, "cache-resident")] == "yes" for r in rows}
    points = []
    for r in rows:
        m = next(x for x in result.measurements if x.name == "decode_tokens_per_s" and x.settings["preset"] == r[0])
        info = result.host_values[f"model_{r[0]}"]
        p = sweep.make_point(r[0], r[col(t, "bytes per token")], m.samples, None, n_params=info["n_params"])
        p["cache_resident"] = llc[r[0]]
        points.append(p)
    analysis = sweep.analyse(points)
    for r in rows:
        assert r[col(t, "verdict")] == analysis["verdicts"][r[0]]["verdict"]
    fit = result.table("bandwidth_fit").rows[0]
    assert fit[1] == pytest.approx(analysis["fit"]["gbs"])
    assert "Verdict:" in " ".join(t.notes)


def test_bandwidth_is_the_runs(result):
    bw = result.measurement("read_bandwidth_gb_per_s")
    assert len(bw.samples) >= 10


def test_plot_is_log_log(result):
    p = next(p for p in result.plots if p.name == "decode_vs_bytes")
    assert p.log_x and p.log_y
    measured = p.series[0]
    assert measured.y_min is not None and all(lo <= y <= hi for lo, y, hi in zip(measured.y_min, measured.y, measured.y_max))


# --- pure helpers --------------------------------------------------------------------------

def test_spark_context_prediction(lesson):
    sp = lesson.spark_context_prediction()
    # deepseek-coder-6.7b: no grouped-query attention, 2 × 32 layers × 32 KV heads × 128 × 2 bytes.
    assert sp["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2 == 524_288
    # 33.2 tokens/s × 7.16 GB = 237.7 GB/s; ÷ (7.16e9 + 524,288 × 1,921) = 29.106 tokens/s.
    assert sp["effective_gbs"] == pytest.approx(33.2 * 7.16)
    assert sp["predicted"] == pytest.approx(33.2 * 7.16e9 / (7.16e9 + 524_288 * 1921))
    assert sp["predicted"] == pytest.approx(29.1, abs=0.05)
    assert sp["published"] == published.LESSON4["decode_long_tokens_per_s"] == 29.6


def test_parse_sizes(lesson):
    assert lesson.parse_sizes(None) == list(lesson.DEFAULT_SIZES)
    assert lesson.DEFAULT_SIZES[:4] == ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")
    assert lesson.parse_sizes("tiny-q8_0, small-q8_0") == ["tiny-q8_0", "small-q8_0"]
    assert lesson.parse_sizes(["medium-f16"]) == ["medium-f16"]
    with pytest.raises(BytesupError, match="huge-q8_0"):
        lesson.parse_sizes("tiny-q8_0,huge-q8_0")


def _points(llc=None):
    # widths of one model (f16 → f32 memory-bound, q8_0 → f16 partly) and a cache-resident small one
    mk = lambda n, b, t, p=1: sweep.make_point(n, b, [t * 0.99, t, t * 1.01], llc, n_params=p)  # noqa: E731
    return [mk("tiny", 5e6, 3000.0, 2), mk("q8_0", 144.8e6, 141.0), mk("f16", 270.9e6, 99.0), mk("f32", 539.8e6, 50.0)]


def test_sweep_row_and_sentences(lesson):
    pts = _points(llc=32 * 2**20)
    analysis = sweep.analyse(pts)
    ref = {"gbs": 40.0, "label": "this host's CPU read", "host_cpu": True}
    answers = {"q8_0": ("' Paris'", 60.0), "f16": ("' Paris'", 61.0), "f32": ("' Paris'", 61.0)}
    row = lesson.sweep_row(pts[3], analysis["verdicts"]["f32"], ref["gbs"], answers["f32"])
    C = lesson.C
    assert row[C["effective"]] == pytest.approx(539.8e6 * 50 / 1e9)
    assert row[C["efficiency"]] == pytest.approx(100 * 26.99 / 40)
    assert row[C["verdict"]] == sweep.MEMORY and row[C["on the line"]] == "yes" and row[C["cache-resident"]] == "no"
    tiny = lesson.sweep_row(pts[0], analysis["verdicts"]["tiny"], ref["gbs"], None)
    assert tiny[C["cache-resident"]] == "yes" and tiny[C["verdict"]] == "cache-resident" and tiny[C["on the line"]] is None
    text = " ".join(lesson.verdict_sentences(pts, analysis, answers, ref, 32 * 2**20))
    assert "From f32 to f16" in text and "memory-bound" in text and "partly memory-bound" in text
    assert "tiny: the weights fit in the 32 MiB last-level cache" in text
    assert "The same top token at every width" in text and "random weights" not in text
    assert "through f16, f32" in text and "Verdict:" in text
    # Without a bandwidth, no efficiency.
    assert lesson.sweep_row(pts[3], analysis["verdicts"]["f32"], None, None)[C["efficiency"]] is None
    assert math.isfinite(analysis["fit"]["gbs"])
