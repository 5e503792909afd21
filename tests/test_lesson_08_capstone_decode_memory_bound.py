"""Lesson 8 replayed from its recorded run: ceilings, efficiencies, the fit, and the size span."""

from __future__ import annotations

from collections import defaultdict

import pytest
from lessonkit import recorded_exchanges

from bytesup import published
from bytesup.errors import BytesupError
from bytesup.records import Timings, decode_tokens_per_s

LESSON = "08_capstone_decode_memory_bound"


def col(table, name: str) -> int:
    return [c.name for c in table.columns].index(name)


def measured_rows(result):
    return [r for r in result.table("decode_vs_ceiling").rows if "published" not in r[0]]


def test_ceiling_and_efficiency_every_row(result):
    t = result.table("decode_vs_ceiling")
    bw = result.measurement("read_bandwidth_gb_per_s").median
    for row in t.rows:
        ceiling = row[col(t, "bandwidth")] * 1e9 / row[col(t, "bytes per token")]
        assert row[col(t, "ceiling")] == pytest.approx(ceiling)
        assert row[col(t, "efficiency")] == pytest.approx(100 * row[col(t, "measured")] / ceiling)
        assert row[col(t, "effective bandwidth")] == pytest.approx(row[col(t, "measured")] * row[col(t, "bytes per token")] / 1e9)
    for row in measured_rows(result):
        assert row[col(t, "bandwidth")] == pytest.approx(bw)
        assert row[col(t, "efficiency min")] == pytest.approx(100 * row[col(t, "measured min")] / row[col(t, "ceiling")])
    pub = next(r for r in t.rows if "published" in r[0])
    spark_ceiling = published.SPARK_BANDWIDTH_GB_PER_S * 1e9 / published.SPECIMEN["file_bytes"]
    assert pub[col(t, "ceiling")] == pytest.approx(spark_ceiling) == pytest.approx(273 / 7.16)
    assert pub[col(t, "measured")] == published.LESSON4["decode_short_tokens_per_s"]
    assert pub[col(t, "efficiency")] == pytest.approx(100 * 33.2 / (273 / 7.16))


def test_measurements_match_rows_and_responses(result):
    t = result.table("decode_vs_ceiling")
    speeds = defaultdict(list)
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/completion":
            assert e["request"]["temperature"] == 0 and e["request"]["cache_prompt"] is False
            speeds[e["server"].removeprefix("preset-")].append(decode_tokens_per_s(Timings(**e["response"]["timings"])))
    for row in measured_rows(result):
        name, b = row[0], row[col(t, "bytes per token")]
        m = next(x for x in result.measurements if x.name == "decode_tokens_per_s" and x.settings["preset"] == name)
        assert m.settings["bytes_per_token"] == b
        assert m.samples == pytest.approx(speeds[name])
        assert row[col(t, "measured")] == pytest.approx(m.median)
        eff = next(x for x in result.measurements if x.name == "decode_efficiency" and x.settings["preset"] == name)
        assert eff.samples == pytest.approx([100 * s / row[col(t, "ceiling")] for s in m.samples])
        assert b == result.host_values[f"model_{name}"]["tensor_bytes"]


def test_fit_recomputed_from_rows(result):
    t = result.table("decode_vs_ceiling")
    rows = measured_rows(result)
    x = [1 / r[col(t, "bytes per token")] for r in rows]
    y = [r[col(t, "measured")] for r in rows]
    slope = sum(a * b for a, b in zip(x, y)) / sum(a * a for a in x)
    mean = sum(y) / len(y)
    r2 = 1 - sum((b - slope * a) ** 2 for a, b in zip(x, y)) / sum((b - mean) ** 2 for b in y)
    assert result.measurement("fit_bandwidth_gb_per_s").samples == [pytest.approx(slope / 1e9)]
    fit = result.table("bandwidth_fit")
    first = fit.rows[0]
    assert first[col(fit, "effective bandwidth")] == pytest.approx(slope / 1e9)
    assert first[col(fit, "R²")] == pytest.approx(r2)
    assert first[col(fit, "of the ceilings' bandwidth")] == pytest.approx(
        100 * slope / 1e9 / result.measurement("read_bandwidth_gb_per_s").median)
    # The conclusion quotes this run's numbers.
    notes = " ".join(t.notes)
    assert f"B = {slope / 1e9:.3g} GB/s" in notes
    assert "Verdict:" in notes


def test_sizes_span_ten_times_one_family(result):
    models = result.table("models")
    sizes = [r[col(models, "bytes per token")] for r in models.rows]
    assert len(sizes) >= 3
    assert max(sizes) / min(sizes) >= 10
    assert len({(r[col(models, "architecture")], r[col(models, "weights")]) for r in models.rows}) == 1
    assert result.settings["sizes"] == ["tiny-q8_0", "small-q8_0", "medium-q8_0"]


def test_plot_is_log_log(result):
    p = next(p for p in result.plots if p.name == "decode_vs_bytes")
    assert p.log_x and p.log_y
    measured = p.series[0]
    assert measured.y_min is not None and all(lo <= y <= hi for lo, y, hi in zip(measured.y_min, measured.y, measured.y_max))


# --- pure helpers --------------------------------------------------------------------------

def test_fit_through_origin(lesson):
    slope, r2 = lesson.fit_through_origin([1.0, 2.0, 4.0], [3.0, 6.0, 12.0])
    assert slope == pytest.approx(3.0) and r2 == pytest.approx(1.0)
    slope, r2 = lesson.fit_through_origin([2.0], [5.0])
    assert slope == pytest.approx(2.5) and r2 is None
    _, r2 = lesson.fit_through_origin([1.0, 2.0, 3.0], [5.0, 1.0, 5.0])
    assert r2 < 0.5


def test_fit_line(lesson):
    a, b, r2 = lesson.fit_line([1.0, 2.0, 3.0], [2.5, 3.0, 3.5])
    assert a == pytest.approx(2.0) and b == pytest.approx(0.5) and r2 == pytest.approx(1.0)
    assert lesson.fit_line([1.0], [1.0]) is None
    assert lesson.fit_line([1.0, 1.0], [1.0, 2.0]) is None


def test_parse_sizes(lesson):
    assert lesson.parse_sizes(None) == ["tiny-q8_0", "small-q8_0", "medium-q8_0"]
    assert lesson.parse_sizes("tiny-q8_0, small-q8_0") == ["tiny-q8_0", "small-q8_0"]
    assert lesson.parse_sizes(["medium-f16"]) == ["medium-f16"]
    with pytest.raises(BytesupError, match="huge-q8_0"):
        lesson.parse_sizes("tiny-q8_0,huge-q8_0")


def _rows(lesson, speeds: dict[str, tuple[float, float]], bw: float = 10.0):
    sizes = {"a": 5e6, "b": 50e6, "c": 500e6}
    return [lesson.decode_row(n, sizes[n], bw, list(s)) for n, s in speeds.items()]


HOST = {"gbs": 10.0, "label": "this host's CPU read", "host_cpu": True}


def _fits(lesson, rows):
    C = lesson.C
    slope, r2 = lesson.fit_through_origin([1 / r[C["bytes per token"]] for r in rows], [r[C["measured"]] for r in rows])
    line = lesson.fit_line([r[C["bytes per token"]] for r in rows], [r[C["time per token"]] for r in rows])
    return slope / 1e9, r2, lesson.check_line(line, rows)


def test_conclusion_memory_bound(lesson):
    # Exactly bandwidth-limited at 80% of 10 GB/s: 1600, 160, 16 tokens/s.
    rows = _rows(lesson, {"a": (1600, 1600), "b": (160, 160), "c": (16, 16)})
    text = " ".join(lesson.conclusion(rows, HOST, *_fits(lesson, rows)))
    assert "80–80%" in text and "follows the bandwidth line" in text and "8 GB/s, 80%" in text


def test_conclusion_overhead_dominated(lesson):
    # A fixed 1 ms per token on top of 10 GB/s reads: small models fall far below their ceilings.
    speeds = {n: (1000 / (1 + b / 1e7),) * 2 for n, b in {"a": 5e6, "b": 50e6, "c": 500e6}.items()}
    rows = _rows(lesson, speeds)
    fit = _fits(lesson, rows)[2]
    assert fit["verdict"] == "holds" and fit["fixed_column"] == pytest.approx(1.0)
    text = " ".join(lesson.conclusion(rows, HOST, *_fits(lesson, rows)))
    assert "less than the 100 ×" in text
    assert "1 ms + bytes ÷ 10 GB/s" in text and "67% of a" in text
    assert "Efficiency rises with size" in text
    assert "memory-bound for the largest model" in text


def test_conclusion_noisy_and_single(lesson):
    rows = _rows(lesson, {"a": (100, 400)})
    slope_gbs, r2, line = _fits(lesson, rows)
    assert line is None
    text = " ".join(lesson.conclusion(rows, HOST, slope_gbs, r2, line))
    assert "One model was measured" in text and "scatter widely" in text and "one model cannot" in text.lower()


def test_conclusion_when_the_smallest_misses_the_line(lesson):
    # Bandwidth-limited at 10 GB/s for b and c, but a runs 3 × faster than that (cache-resident).
    rows = _rows(lesson, {"a": (6000, 6000), "b": (200, 200), "c": (20, 20)})
    slope_gbs, r2, fit = _fits(lesson, rows)
    assert fit["verdict"] == "misses" and fit["fixed_column"] is None
    text = " ".join(lesson.conclusion(rows, HOST, slope_gbs, r2, fit))
    assert "misses a by +" in text and "no fixed per-token cost is read" in text
    assert "a decoded faster than the ceiling allows" in text and "CPU caches" in text
    # The fit table's note follows the same decision: no fixed time is quoted.
    note = lesson.line_note(fit)
    assert "misses a by +" in note and "left blank" in note and "a fixed" not in note
    # With a given bandwidth (not this CPU's), nothing is said about CPU caches.
    given = {"gbs": 10.0, "label": "given with --bandwidth-gbs", "host_cpu": False}
    text = " ".join(lesson.conclusion(rows, given, slope_gbs, r2, fit))
    assert "CPU caches" not in text and "given with --bandwidth-gbs is below what fed decode" in text


def test_conclusion_scales_but_far_below_ceiling(lesson):
    # Bandwidth-limited at 3 GB/s while the bandwidth test read 10 GB/s: speed follows size at 30%.
    rows = _rows(lesson, {"a": (600, 600), "b": (60, 60), "c": (6, 6)})
    text = " ".join(lesson.conclusion(rows, HOST, *_fits(lesson, rows)))
    assert "speed follows size" in text and "30–30% of the ceiling" in text and "effective 3 GB/s" in text


def test_no_bandwidth_applies(lesson):
    # The server decodes elsewhere and no --bandwidth-gbs: no ceiling, no efficiency, no CPU claims.
    sizes = {"a": 5e6, "b": 50e6, "c": 500e6}
    rows = [lesson.decode_row(n, sizes[n], None, [s, s]) for n, s in {"a": 1600, "b": 160, "c": 16}.items()]
    for r in rows:
        assert r[lesson.C["ceiling"]] is None and r[lesson.C["efficiency"]] is None
        assert r[lesson.C["effective bandwidth"]] == pytest.approx(8.0)
    slope_gbs, r2, fit = _fits(lesson, rows)
    reason = "the server runs on gpu-box, not on this host"
    text = " ".join(lesson.conclusion(rows, None, slope_gbs, r2, fit, reason))
    assert f"cannot be judged against this host's CPU bandwidth: {reason}" in text
    assert "B = 8 GB/s (R²" in text and "% of the" not in text and "ceiling allows" not in text
    assert "speed follows size" in text and "--bandwidth-gbs" in text
    one = " ".join(lesson.conclusion(rows[:1], None, slope_gbs, None, None, reason))
    assert "effective 8 GB/s" in one and "cannot show whether" in one


def test_line_decision_is_used_by_the_table_and_notes(result, lesson):
    fit = result.table("bandwidth_fit")
    rows = measured_rows(result)
    t = result.table("decode_vs_ceiling")
    line = lesson.fit_line([r[col(t, "bytes per token")] for r in rows], [r[col(t, "time per token")] for r in rows])
    decided = lesson.check_line(line, rows)
    second = fit.rows[1]
    assert second[col(fit, "fixed time per token")] == decided["fixed_column"]
    notes = " ".join(t.notes + fit.notes)
    if decided["verdict"] == "misses":
        assert second[col(fit, "fixed time per token")] is None
        assert "no fixed per-token cost is read" in notes and "a fixed" not in notes
    elif decided["verdict"] == "holds":
        assert f"a fixed {decided['fixed_ms']:.3g} ms" in notes
