"""Lesson 8: tokens/s, bytes per token, effective GB/s and efficiency on hand-made answers worked out
here, and the sweep table, the verdicts and the fit recomputed from the recorded run."""

from __future__ import annotations

import contextlib
import re
import math
from collections import defaultdict

import pytest
from lessonkit import QueuedServer, hand_context, recorded_exchanges

from bytesup.course import published
from bytesup.course import memory_bound as sweep
from bytesup.errors import BytesupError
from bytesup.llama.responses import Completion, Timings, decode_tokens_per_s
from bytesup.store.rows import cells, columns

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
    """Each server: the top answer, the warm-up (not a sample), the timed decodes, then batches at P = 2 and 4,
    then, on the first model of each weight type, a prefill's warm-up and timed prefills of token ids."""
    plan = result.host_values["sample_plan"]
    prefill_plan = result.host_values.get("prefill_plan")
    speeds, together, prefills = defaultdict(list), defaultdict(list), defaultdict(list)
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/completion" and "n_probs" not in e["request"]:
            assert e["request"]["temperature"] == 0 and e["request"]["cache_prompt"] is False
            tps = decode_tokens_per_s(Timings(**e["response"]["timings"]))
            name = e["server"].removeprefix("preset-")
            if isinstance(e["request"]["prompt"], list):  # a prefill: token ids, one token generated
                assert len(e["request"]["prompt"]) == prefill_plan["tokens"] and e["request"]["n_predict"] == 1
                t = e["response"]["timings"]
                prefills[name].append(1e3 * t["prompt_n"] / t["prompt_ms"])
            elif "id_slot" in e["request"]:
                together[(name, (e["request"]["seed"] - lesson_seed_base()) // 100)].append(tps)
            else:
                speeds[name].append(tps)
    for m in result.measurements:
        if m.name == "decode_tokens_per_s":
            recorded = speeds[m.settings["preset"]]
            assert len(recorded) == plan["warmup"] + plan["samples"] and plan["samples"] >= 5
            assert m.samples == pytest.approx(recorded[plan["warmup"]:])
        if m.name == "decode_tokens_per_s_per_sequence":
            assert sorted(m.samples) == pytest.approx(sorted(together[(m.settings["preset"], m.settings["parallel"])]))
        if m.name == "prefill_tokens_per_s":
            recorded = prefills.pop(m.settings["preset"])
            assert m.samples == pytest.approx(recorded[prefill_plan["warmup"]:]) and len(m.samples) >= 5
    assert {P for _, P in together} == set(plan["levels"])
    assert not prefills  # every timed prefill is a measurement


def lesson_seed_base() -> int:
    from bytesup.run.lessons import load_lesson

    return load_lesson(LESSON).BATCH_SEED_BASE


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
    assert measured.y_min is not None and all(lo <= y <= hi for lo, y, hi in zip(measured.y_min, measured.y, measured.y_max, strict=True))


# --- pure computation, against hand arithmetic -------------------------------------------------

def test_spark_context_prediction(lesson):
    sp = lesson.spark_context_prediction()
    # deepseek-coder-6.7b: no grouped-query attention, 2 × 32 layers × 32 KV heads × 128 × 2 bytes.
    assert sp.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    # 33.2 tokens/s × 7.16 GB = 237.712 GB/s; ÷ (7.16e9 + 524,288 × 1,921 = 8,167,157,248 bytes) = 29.106 tokens/s.
    assert sp.effective_gbs == pytest.approx(237.712)
    assert sp.predicted == pytest.approx(237.712e9 / 8_167_157_248) == pytest.approx(29.106, abs=0.001)
    assert sp.published == published.LESSON4["decode_long_tokens_per_s"] == 29.6
    assert sp.error == pytest.approx(29.106 / 29.6 - 1, abs=1e-4)  # −1.7%


def test_published_point_by_hand(lesson):
    pub = lesson.published_point()
    assert pub.effective_gbs == pytest.approx(237.712)  # 33.2 × 7.16 GB
    assert pub.efficiency_percent == pytest.approx(87.074, abs=0.001)  # 237.712 ÷ 273
    assert pub.ceiling_tokens_per_s == pytest.approx(38.128, abs=0.001)  # 273 ÷ 7.16


def test_effective_gbs_and_efficiency_by_hand(lesson):
    # 70.7 tokens/s × 98,362,432 bytes = 6,954,223,942 bytes/s = 6.954 GB/s; of 10 GB/s: 69.54%.
    assert lesson.decode_efficiency_samples([70.7], 98_362_432, 10.0) == [pytest.approx(69.542, abs=0.001)]
    assert lesson.efficiency_percent(6.0, 8.0) == 75.0
    p = sweep.make_point("w", 98_362_432, [68.0, 70.7, 73.0], None, weight_type="Q8_0")
    verdict = {"on_line": True, "residual": -0.02, "verdict": sweep.MEMORY}
    row = lesson.sweep_row(p, verdict, 10.0, lesson.TopAnswer("' Paris'", 77.1))
    assert (row.decode.median, row.decode.min, row.decode.max) == (70.7, 68.0, 73.0)
    # 68 × 98,362,432 = 6,688,645,376; 73 × 98,362,432 = 7,180,457,536.
    assert row.effective.median == pytest.approx(6.95422, abs=1e-5)
    assert (row.effective.min, row.effective.max) == (pytest.approx(6.688645376), pytest.approx(7.180457536))
    assert row.efficiency is not None
    assert (row.efficiency.median, row.efficiency.min, row.efficiency.max) == (
        pytest.approx(69.5422, abs=1e-4), pytest.approx(66.88645376), pytest.approx(71.80457536))
    assert row.off_line_percent == pytest.approx(-2.0) and row.on_line is True and row.verdict == sweep.MEMORY
    # The table's cells by column name: each value under its own header.
    (values,) = cells([lesson.sweep_table_row(row)])
    C = dict(zip([name for name, _ in columns(lesson.SweepTableRow)], values, strict=True))
    assert C["effective"] == row.effective.median and C["top token"] == "' Paris'"
    assert C["on the line"] == "yes" and C["cache-resident"] == "no"
    # Without a bandwidth, no efficiency.
    assert lesson.sweep_row(p, verdict, None, None).efficiency is None


def test_top_answer_is_the_most_probable_candidate(lesson):
    c = Completion(content=" Paris", timings={"prompt_n": 6, "prompt_ms": 5.0, "predicted_n": 1, "predicted_ms": 0.0},
                   completion_probabilities=[{"id": 1, "token": " Paris", "logprob": -0.26, "top_logprobs": [
                       {"id": 2, "token": " the", "logprob": -2.0}, {"id": 1, "token": " Paris", "logprob": -0.26},
                       {"id": 3, "token": " a", "logprob": -3.0}]}])
    answer = lesson.top_answer(c)
    assert answer.token == "' Paris'" and answer.percent == pytest.approx(77.105, abs=0.001)  # e^−0.26


def test_fastest_memory_sample(lesson):
    before, after = {"gb_per_s": {"max": 16.9}}, {"gb_per_s": {"max": 16.5}}
    assert lesson.fastest_memory_gbs(before, after) == 16.9
    assert lesson.fastest_memory_gbs(before, {"gb_per_s": {"max": 17.2}}) == 17.2
    assert lesson.fastest_memory_gbs(before, None) == 16.9 and lesson.fastest_memory_gbs(None, after) is None
    # A slow host (0.5 GB/s at best) with an "after" reading that has no bandwidth: 0.5, nothing invented.
    assert lesson.fastest_memory_gbs({"gb_per_s": {"max": 0.5}}, {}) == 0.5
    assert lesson.fastest_memory_gbs({"gb_per_s": {"max": 0.5}}, {"gb_per_s": {}}) == 0.5


def test_parse_sizes(lesson):
    assert lesson.parse_sizes(None) == list(lesson.DEFAULT_SIZES)
    assert lesson.DEFAULT_SIZES[:4] == ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")
    assert lesson.parse_sizes("tiny-q8_0, small-q8_0") == ["tiny-q8_0", "small-q8_0"]
    assert lesson.parse_sizes(["medium-f16"]) == ["medium-f16"]
    with pytest.raises(BytesupError, match="huge-q8_0"):
        lesson.parse_sizes("tiny-q8_0,huge-q8_0")
    # Blank names are dropped, not reported.
    assert lesson.parse_sizes("tiny-q8_0, ,") == ["tiny-q8_0"]
    from bytesup.models.catalog import model_names
    known = ", ".join(model_names())
    with pytest.raises(BytesupError) as err:
        lesson.parse_sizes("huge-q8_0,tiny-q8_0,gigantic")
    assert str(err.value) == f"Unknown model(s) huge-q8_0, gigantic in --sizes. Models: {known}, or a path to a .gguf file."
    with pytest.raises(BytesupError) as err:
        lesson.parse_sizes(" , ")
    assert str(err.value) == f"Unknown model(s) (none given) in --sizes. Models: {known}, or a path to a .gguf file."


def test_sizes_take_gguf_paths(lesson, tmp_path):
    gguf = tmp_path / "mine-q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert lesson.parse_sizes(f"tiny-q8_0,{gguf}") == ["tiny-q8_0", str(gguf)]
    with pytest.raises(BytesupError, match="No GGUF file at /nowhere/x.gguf in --sizes"):
        lesson.parse_sizes("/nowhere/x.gguf")


def _points(llc=None):
    # widths of one model (f16 → f32 memory-bound, q8_0 → f16 partly) and a cache-resident small one
    mk = lambda n, b, t, p=1: sweep.make_point(n, b, [t * 0.99, t, t * 1.01], llc, n_params=p)  # noqa: E731
    return [mk("tiny", 5e6, 3000.0, 2), mk("q8_0", 144.8e6, 141.0), mk("f16", 270.9e6, 99.0), mk("f32", 539.8e6, 50.0)]


def test_verdict_sentences(lesson):
    pts = _points(llc=32 * 2**20)
    analysis = sweep.analyse(pts)
    ref = lesson.BandwidthReference(40.0, "this host's CPU read", host_cpu=True)
    answers = {n: lesson.TopAnswer("' Paris'", pct) for n, pct in (("q8_0", 60.0), ("f16", 61.0), ("f32", 61.0))}
    row = lesson.sweep_row(pts[3], analysis["verdicts"]["f32"], ref.gbs, answers["f32"])
    assert row.effective.median == pytest.approx(539.8e6 * 50 / 1e9)  # 26.99 GB/s
    assert row.efficiency is not None and row.efficiency.median == pytest.approx(100 * 26.99 / 40)
    assert row.verdict == sweep.MEMORY and row.on_line is True and row.cache_resident is False
    tiny = lesson.sweep_row(pts[0], analysis["verdicts"]["tiny"], ref.gbs, None)
    assert tiny.cache_resident is True and tiny.verdict == "cache-resident" and tiny.on_line is None
    text = " ".join(lesson.verdict_sentences(pts, analysis, answers, ref, 32 * 2**20))
    assert "From f32 to f16" in text and "memory-bound" in text and "partly memory-bound" in text
    assert "tiny: the weights fit in the 32 MiB last-level cache" in text
    assert "The same top token at every width" in text and "random weights" not in text
    assert "through f16, f32" in text and "Verdict:" in text
    assert math.isfinite(analysis["fit"]["gbs"])


# --- main on hand-made answers ---------------------------------------------------------------

def _decode(ms: float) -> dict:
    """A timed decode: 33 tokens, so 32 passes in `ms`: 32,000 ÷ ms tokens/s."""
    return {"content": "", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 33, "predicted_ms": ms}}


def _top(logprob: float) -> dict:
    return {"content": " Paris", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 1, "predicted_ms": 0.0},
            "completion_probabilities": [{"id": 7, "token": " Paris", "logprob": logprob, "top_logprobs": [
                {"id": 7, "token": " Paris", "logprob": logprob}, {"id": 8, "token": " the", "logprob": -2.5}]}]}


def _header(name: str, n_params: int, tensor_bytes: int, weight_type: str) -> dict:
    return {"preset": name, "name": name, "path": f"/models/{name}.gguf", "architecture": "llama", "n_layer": 30,
            "n_embd": 576, "n_params": n_params, "tensor_bytes": tensor_bytes, "weight_type": weight_type}


def _bandwidth(samples=(11.0, 12.0, 13.0)) -> dict:
    return {"threads": 2, "bytes_per_thread": 512 * 2**20, "bytes_per_sample": 1024 * 2**20, "method": "by hand",
            "gb_per_s": {"samples": list(samples), "median": sorted(samples)[len(samples) // 2], "min": min(samples),
                         "max": max(samples)},
            "llc_bytes": 128 * 2**20, "llc_source": "by hand"}


def test_main_sweep_on_hand_made_answers(lesson):
    """Two widths of one model on servers of their own, and a third model too big for memory: every
    number of the sweep worked out by hand below."""
    q8, f16, large = "smollm2-135m-q8_0", "smollm2-135m-f16", "large-q8_0"
    servers = {
        # q8_0: 32 passes in 400 ms = 80 tokens/s, in 320 ms = 100 tokens/s (median 90).
        f"preset-{q8}": QueuedServer({"/completion": [_top(-0.26), _decode(400.0), _decode(320.0)]}),
        # f16: 800 ms = 40 tokens/s, 640 ms = 50 tokens/s (median 45).
        f"preset-{f16}": QueuedServer({"/completion": [_top(-0.25), _decode(800.0), _decode(640.0)]}),
    }
    started = []

    def local_server(label, model, flags):
        started.append((label, model, flags))
        return contextlib.nullcontext(servers[label].server)

    facts = {"url_host": "127.0.0.1", "local": True, "model_readable": True, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": True, "reason": "by hand"}
    host_values = {
        "server_facts": facts, "option_sizes": f"{q8},{f16},{large}", "option_bandwidth_gbs": None,
        "available_memory_bytes": 16_000_000_000,
        # 100,000,000 parameters: 1.0625 bytes each (q8_0), 2 bytes each (f16).
        f"model_{q8}": _header(q8, 100_000_000, 106_250_000, "Q8_0"),
        f"model_{f16}": _header(f16, 100_000_000, 200_000_000, "F16"),
        f"model_{large}": _header(large, 9_000_000_000, 9_000_000_000, "Q8_0"),  # 9 GB > half of 16 GB
    }
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = local_server
    result = lesson.main(ctx)
    assert all(s.left() == {} for s in servers.values())
    assert [label for label, _, _ in started] == [f"preset-{q8}", f"preset-{f16}"]  # the large model never started
    assert str(started[0][1]) == f"/models/{q8}.gguf"
    for srv in servers.values():
        top, *timed = [body for _, _, body in srv.requests]
        assert top["n_probs"] == 3 and top["temperature"] == 0 and top["post_sampling_probs"] is False
        assert all(b["temperature"] == 0 and b["cache_prompt"] is False and b["n_predict"] == 32 for b in timed)

    models_t = result.table("models")
    assert [r[col(models_t, "bytes per token")] for r in models_t.rows] == [106_250_000, 200_000_000]
    assert [r[col(models_t, "bytes per parameter")] for r in models_t.rows] == [1.0625, 2.0]
    # 106.25 MB fits in the 128 MiB (134,217,728 bytes) cache by size; its slowest sample reads 80 × 106.25e6 =
    # 8.5 GB/s, below the fastest memory sample of 13 GB/s: not cache-resident.
    assert [r[col(models_t, "fits in the cache")] for r in models_t.rows] == ["yes", "no"]
    assert [r[col(models_t, "cache-resident")] for r in models_t.rows] == ["no", "no"]
    assert "Skipped for memory: large-q8_0 (9 GB), more than 50% of the 16 GB available." in models_t.notes

    t = result.table("sweep")
    q8_row, f16_row, pub_row = t.rows
    expect = {
        "decode": (90.0, 45.0), "decode min": (80.0, 40.0), "decode max": (100.0, 50.0),
        # effective = tokens/s × bytes per token: 90 × 106.25e6 = 9.5625 GB/s; 45 × 200e6 = 9.0 GB/s.
        "effective": (9.5625, 9.0), "effective min": (8.5, 8.0), "effective max": (10.625, 10.0),
        # ÷ the run's bandwidth, 12 GB/s (the median of 11, 12, 13).
        "efficiency": (100 * 9.5625 / 12, 75.0), "efficiency min": (100 * 8.5 / 12, 100 * 8 / 12),
        "efficiency max": (100 * 10.625 / 12, 100 * 10 / 12),
        "top token probability": (77.105, 77.880),  # e^−0.26, e^−0.25
    }
    for name, (a, b) in expect.items():
        assert (q8_row[col(t, name)], f16_row[col(t, name)]) == pytest.approx((a, b), abs=1e-3), name
    assert q8_row[col(t, "top token")] == f16_row[col(t, "top token")] == "' Paris'"
    # 200e6 ÷ 106.25e6 = 1.882 × the bytes for 90 ÷ 45 = 2 × the speed, within the 25% spread: memory-bound.
    assert q8_row[col(t, "verdict")] == f16_row[col(t, "verdict")] == sweep.MEMORY
    assert pub_row[col(t, "effective")] == pytest.approx(237.712)
    eff = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_efficiency"}
    # Each sample: 80 × 106.25e6 ÷ 12e9 = 70.83%, 100 × 106.25e6 ÷ 12e9 = 88.54%; 40 × 2e8 ÷ 12e9 = 66.67%, 83.33%.
    assert eff == {q8: pytest.approx([70.8333, 88.5417], abs=1e-4), f16: pytest.approx([66.6667, 83.3333], abs=1e-4)}
    decode = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s"}
    assert decode == {q8: pytest.approx([80.0, 100.0]), f16: pytest.approx([40.0, 50.0])}

    steps = result.table("steps").rows
    assert len(steps) == 1 and steps[0][:2] == [q8, f16]
    assert steps[0][2:5] == pytest.approx([200 / 106.25, 2.0, 2.0 / (200 / 106.25)])

    fit = result.table("bandwidth_fit").rows[0]
    # B = exp(mean of each point's mean ln effective GB/s) = ((8.5 × 10.625) × (8 × 10))^(1/4) = 7225^(1/4) = √85.
    assert fit[1] == pytest.approx(math.sqrt(85)) and fit[4] == pytest.approx(100 * math.sqrt(85) / 12)
    assert result.table("bandwidth_fit").rows[1][1:5] == [12.0, 11.0, 13.0, 100.0]


def test_main_on_a_remote_server_with_a_given_bandwidth(lesson):
    """A server elsewhere: only its one model, sized from /v1/models meta, against --bandwidth-gbs 20."""
    server = QueuedServer({
        "/v1/models": [{"data": [{"id": "hand.gguf", "meta": {"n_params": 135_000_000, "size": 98_362_432}}]}],
        # 32 passes in 452.6 ms: 70.7 tokens/s.
        "/completion": [_top(-0.26), _decode(32_000 / 70.7), _decode(32_000 / 70.7)],
    })
    facts = {"url_host": "gpu.example", "local": False, "model_readable": False, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": False, "reason": "the server runs on gpu.example"}
    ctx = hand_context(LESSON, server, host_values={"server_facts": facts, "option_bandwidth_gbs": 20})
    result = lesson.main(ctx)
    assert server.left() == {}
    t = result.table("sweep")
    row = t.rows[0]
    assert row[col(t, "bytes per token")] == 98_362_432 and row[col(t, "decode")] == pytest.approx(70.7)
    # 70.7 × 98,362,432 = 6.954 GB/s; ÷ 20 GB/s = 34.77%.
    assert row[col(t, "effective")] == pytest.approx(6.9542, abs=1e-4)
    assert row[col(t, "efficiency")] == pytest.approx(34.771, abs=1e-3)
    m = result.measurement("decode_efficiency")
    assert m.settings["bandwidth_gbs"] == 20.0 and m.samples == [pytest.approx(34.771, abs=1e-3)] * 2
    assert any("20 GB/s given with --bandwidth-gbs" in n for n in t.notes)
    assert "Only the one model the user's server serves was measured" in " ".join(result.table("models").notes)


def test_fit_rows_share_one_reference(lesson):
    from bytesup.course.ceiling import BandwidthReference

    analysis = {"fit": {"gbs": 12.0, "gbs_low": 11.0, "gbs_high": 13.0}, "basis": ["a", "b"]}
    before, after = {"gb_per_s": {"median": 10.0, "min": 9.0, "max": 11.0}}, {"gb_per_s": {"median": 8.0, "min": 7.0, "max": 9.0}}
    # Given 20 GB/s (--bandwidth-gbs): the fit 12 ÷ 20 = 60%, the readings 10 ÷ 20 = 50% and 8 ÷ 20 = 40%.
    given = lesson.fit_rows(analysis, BandwidthReference(20.0, "given", False), before, after)
    assert [r.percent_of_run for r in given] == [pytest.approx(60.0), pytest.approx(50.0), pytest.approx(40.0)]
    # The host's own reading as the reference: 12 ÷ 10 = 120%, 100%, 8 ÷ 10 = 80%.
    host = lesson.fit_rows(analysis, BandwidthReference(10.0, "host", True), before, after)
    assert [r.percent_of_run for r in host] == [pytest.approx(120.0), pytest.approx(100.0), pytest.approx(80.0)]


# --- the decode-time model -----------------------------------------------------------------------

@pytest.mark.parametrize("in_turns", [False, True])
def test_main_decode_model_on_hand_made_step_times(lesson, in_turns):
    """Four models with steps at P = 1 made from B = 50 GB/s, c = 25 ps per parameter and F = 2 ms (see
    tests/test_decodetime.py), large-q8_0 10% slower than that; the first of each weight type also at P = 2 and 4.
    One model after another (a run recorded before turns and prefills), or every server up at once and the timed
    decodes in turns: each server gets the same requests in the same order, and the tables are the same; that run
    also times a 128-token prefill on the first model of each weight type."""
    q4, q8, f32, big = "smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f32", "large-q8_0"
    # q4_1: 100 MB in 2 ms, 100 M × 25 ps = 2.5 ms: 2 + 2.5 = 4.5 ms; q8_0: 200 MB, 4 ms: 6 ms; f32: 400 MB: 10 ms;
    # large: 1,000 MB in 20 ms, 1,000 M × 25 ps = 25 ms: 27 ms, measured 29.7. 32 passes per decode.
    step = {q4: {1: 4.5, 2: 9.0, 4: 12.0}, q8: {1: 6.0, 2: 10.0, 4: 14.0}, f32: {1: 10.0, 2: 14.0, 4: 18.0}}

    order: list[str] = []  # the model of each timed decode at P = 1, in the order they were sent

    def timed(name: str, ms: float):
        def answer(body):
            order.append(name)
            return _decode(ms)
        return answer

    # Prefill of 128 tokens in 256, 128 and 64 ms: 500, 1,000 and 2,000 tokens/s (a warm-up of 9,999 ms first).
    prefill_ms = {q4: 256.0, q8: 128.0, f32: 64.0}

    def prefill(ms: float) -> dict:
        return {"content": "", "timings": {"prompt_n": 128, "prompt_ms": ms, "predicted_n": 1, "predicted_ms": 0.0}}

    def answers(name: str) -> list:
        s = step[name]
        return [_top(-0.3), _decode(9_999.0), *[timed(name, 32 * s[1])] * 5, *[_decode(32 * s[2])] * 6,
                *[_decode(32 * s[4])] * 8, *([prefill(9_999.0), *[prefill(prefill_ms[name])] * 5] if in_turns else [])]

    servers = {f"preset-{n}": QueuedServer({"/completion": answers(n),
                                           **({"/tokenize": [{"tokens": list(range(200))}]} if in_turns else {})})
               for n in step}
    servers[f"preset-{big}"] = QueuedServer({"/completion": [_top(-0.3), _decode(1.0),
                                                             *[timed(big, 32 * 29.7)] * 5]})
    started = []

    def local_server(label, model, flags):
        started.append(flags)
        return contextlib.nullcontext(servers[label].server)

    facts = {"url_host": "127.0.0.1", "local": True, "model_readable": True, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": True, "reason": "by hand"}
    host_values = {
        "server_facts": facts, "option_sizes": f"{q4},{q8},{f32},{big}", "option_bandwidth_gbs": None,
        "available_memory_bytes": 16_000_000_000, "sample_plan": {"warmup": 1, "samples": 5, "levels": [2, 4]},
        f"model_{q4}": _header(q4, 100_000_000, 100_000_000, "Q4_1"),
        f"model_{q8}": _header(q8, 100_000_000, 200_000_000, "Q8_0"),
        f"model_{f32}": _header(f32, 100_000_000, 400_000_000, "F32"),
        f"model_{big}": _header(big, 1_000_000_000, 1_000_000_000, "Q8_0"),
        "matvec_bandwidth": {"threads": 2, "bytes_per_sample": 536_870_912, "gb_per_s":
                             {"samples": [40.0] * 5, "median": 40.0, "min": 39.0, "max": 41.0}},
    }
    if in_turns:
        host_values[lesson.IN_TURNS] = True
        host_values["prefill_plan"] = {"warmup": 1, "samples": 5, "tokens": 128}
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = local_server
    result = lesson.main(ctx)
    assert all(s.left() == {} for s in servers.values())
    names = [q4, q8, f32, big]
    assert order == (names * 5 if in_turns else [n for n in names for _ in range(5)])
    prefill_t = next((t for t in result.tables if t.name == "prefill_per_width"), None)
    if not in_turns:
        assert prefill_t is None and not [m for m in result.measurements if m.name == "prefill_tokens_per_s"]
    else:
        assert prefill_t is not None
        pre = {r[0]: r for r in prefill_t.rows}
        assert list(pre) == [q4, q8, f32]  # large-q8_0 is not the first of its weight type
        # q4_1: 500 tokens/s, 2 × 100 M × 500 = 100 GFLOP/s, 2 ms a token; decode's arithmetic 100 M × c (about
        # 25 ps) = about 2.5 ms, so about 1.25 × a token of prefill; f32: 2,000 tokens/s, 0.5 ms, about 5 ×.
        assert pre[q4][2:8] == [500.0, 500.0, 500.0, pytest.approx(100.0), 2.0, pytest.approx(2.5, rel=0.12)]
        assert pre[q4][8] == pytest.approx(pre[q4][7] / 2.0)
        assert pre[f32][2] == 2000.0 and pre[f32][8] == pytest.approx(pre[f32][7] / 0.5)
        assert [m.settings for m in result.measurements if m.name == "prefill_tokens_per_s"] == [
            {"preset": n, "prompt_tokens": 128} for n in (q4, q8, f32)]
        assert all(s.requests[-6][2]["prompt"] == list(range(128)) for n, s in servers.items() if n != f"preset-{big}")
        notes = " ".join(prefill_t.notes)
        assert "5 timed prefills after 1 warm-up, from the server's prompt_ms" in notes
        assert f"to {pre[f32][8]:.2g}× ({f32})" in notes
    assert started[0][-4:] == ["-c", "1024", "--parallel", "4"]  # four slots of 256 tokens
    batch = [b for _, path, b in servers[f"preset-{q8}"].requests if path == "/completion"][7:21]
    # three batches of 2 and two of 4 (the order within a batch is the threads')
    assert sorted(b["id_slot"] for b in batch[:6]) == [0, 0, 0, 1, 1, 1]
    assert sorted(b["id_slot"] for b in batch[6:]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({b["seed"] for b in batch}) == 14  # each request of a batch its own seed
    # The warm-up is not a sample: 32 passes in 144 ms, 222.2 tokens/s, five times.
    decode = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s"}
    assert decode[q4] == pytest.approx([1000 / 4.5] * 5)

    t = result.table("decode_model")
    rows = {r[0]: r for r in t.rows}
    assert rows[q8][col(t, "step at P = 2")] == pytest.approx(10.0) and rows[big][col(t, "step at P = 2")] is None
    # the batch line through (2, 9) and (4, 12) ms: 1.5 ms per sequence, 6 ms at P = 0
    assert rows[q4][col(t, "batch line a")] == pytest.approx(6.0) and rows[q4][col(t, "batch line b")] == pytest.approx(1.5)
    # The fit's terms come back within a grid step: q4_1 read 2 ms, arithmetic 2.5 ms, fixed 2 ms
    assert rows[q4][col(t, "read the weights")] == pytest.approx(2.0, rel=0.05)
    assert rows[q4][col(t, "arithmetic")] == pytest.approx(2.5, rel=0.12)
    assert rows[q4][col(t, "fixed")] == pytest.approx(2.0, rel=0.15)
    # large by the other three alone: 2 + max(20, 25) = 27 ms, 37.04 tokens/s, against 1000 ÷ 29.7 = 33.67: +10%
    assert rows[big][col(t, "predicted")] == pytest.approx(1000 / 27, rel=0.02)
    assert rows[big][col(t, "predicted ÷ measured − 1")] == pytest.approx(10.0, abs=2.0)
    assert [rows[n][col(t, "waits on")] for n in (q4, q8, f32, big)] == [
        "compute-bound", "memory-bound", "memory-bound", "compute-bound"]
    assert rows[f32][col(t, "read share")] > 75  # 8 of about 10 ms
    spark = rows[next(n for n in rows if "published" in n)]
    assert spark[col(t, "read the weights")] == pytest.approx(26.2271, abs=1e-4)
    assert spark[col(t, "waits on")] == "memory-bound"
    notes = " ".join(t.notes)
    assert "t₁ = L × f + max(W ÷ B, n × c)" in notes and "Fitted on the 4 models" in notes
    assert "Within ±15% of measured: 4 of 4" in notes
    # the fitted B (about 50 GB/s; 48.3 with large-q8_0 10% slow) against numpy's matrix-vector product's 40
    b_fit = float(re.search(r"B = ([0-9.]+) GB/s", notes).group(1))
    share = int(re.search(r"537 MB with 2 thread\(s\)\): 40 GB/s, so B is (\d+)% of it", notes).group(1))
    assert 45 < b_fit < 55 and abs(share - 100 * b_fit / 40) <= 1
    fit = result.table("bandwidth_fit")
    assert fit.rows[-1][:4] == ["numpy's float32 matrix-vector product over 537 MB, 2 thread(s), before the decode work",
                                40.0, 39.0, 41.0]
    assert "From one sequence to two the step grows by: smollm2-135m-q4_1 4.5 ms, then 1.5 ms per sequence" in notes
    fact = result.facts["decode_model"]
    assert fact["widths"][3]["step_ms"] == {"1": pytest.approx(29.7)} and fact["tolerance"] == 0.15
    per_seq = [m for m in result.measurements if m.name == "decode_tokens_per_s_per_sequence"]
    assert {(m.settings["preset"], m.settings["parallel"], len(m.samples)) for m in per_seq} == {
        (q4, 2, 6), (q4, 4, 8), (q8, 2, 6), (q8, 4, 8), (f32, 2, 6), (f32, 4, 8)}


def test_an_old_recording_replays_without_the_model(lesson):
    """A recording made before the sample plan: no warm-up, ctx.repeat decodes, no lines, no model table."""
    q8 = "smollm2-135m-q8_0"
    server = QueuedServer({"/completion": [_top(-0.3), _decode(400.0), _decode(320.0)]})
    facts = {"url_host": "127.0.0.1", "local": True, "model_readable": True, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": True, "reason": "by hand"}
    host_values = {"server_facts": facts, "option_sizes": q8, "option_bandwidth_gbs": None,
                   "available_memory_bytes": 16_000_000_000, f"model_{q8}": _header(q8, 100_000_000, 106_250_000, "Q8_0")}
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = lambda label, model, flags: contextlib.nullcontext(server.server)
    result = lesson.main(ctx)
    assert server.left() == {}
    assert "decode_model" not in {t.name for t in result.tables} and "decode_model" not in result.facts
    assert "sample_plan" not in result.host_values


def test_step_ms_leaves_an_outlier_out(lesson):
    # the 7.4 tokens/s (135 ms) is an outlier and not used: the median of 10.684 and 10.650 ms of the four others
    assert lesson.step_ms([93.6, 94.5, 93.1, 7.4, 93.9]) == pytest.approx((1000 / 93.6 + 1000 / 93.9) / 2)
    assert lesson.step_ms([100.0, 50.0]) == pytest.approx(15.0)  # 10 and 20 ms


def test_batch_bodies(lesson):
    bodies = lesson.batch_bodies(4, 1)
    assert [b["id_slot"] for b in bodies] == [0, 1, 2, 3]
    assert [b["seed"] for b in bodies] == [8410, 8411, 8412, 8413]
    assert all(b["temperature"] == 0 and b["cache_prompt"] is False and b["n_predict"] == 32 for b in bodies)
    plan = lesson.SamplePlan(1, 5, (2, 4))
    assert (plan.rounds(2), plan.rounds(4), plan.slots) == (3, 2, 4)


def test_the_default_sweep_includes_a_third_shape_and_older_runs_replay_without_it(lesson):
    assert "medium-q8_0" in lesson.DEFAULT_SIZES and "medium-q8_0" not in lesson.SIZES_BEFORE_MEDIUM
    assert list(lesson.SIZES_BEFORE_MEDIUM) == [n for n in lesson.DEFAULT_SIZES if n != "medium-q8_0"]
    older = hand_context(LESSON, QueuedServer({}))
    assert lesson.default_sizes(older) == list(lesson.SIZES_BEFORE_MEDIUM)
    newer = hand_context(LESSON, QueuedServer({}), host_values={"default_sizes": list(lesson.DEFAULT_SIZES)})
    assert lesson.default_sizes(newer) == list(lesson.DEFAULT_SIZES)
    assert lesson.parse_sizes(None, lesson.SIZES_BEFORE_MEDIUM) == list(lesson.SIZES_BEFORE_MEDIUM)


def test_a_verdict_that_one_model_turns_over_is_shown_mixed(lesson):
    """Six models' steps made by hand from B = 50 GB/s, c = 25 ps and f = 0.08 ms per block, q4_1's 15% faster:
    the Q8_0 models, 15% from the ridge, are mixed in the table and the notes; f32 stays memory-bound."""
    from bytesup.course import decodetime as dt
    terms = dt.Terms(50.0, 25.0, 0.08, ())
    shapes = [("q4_1", "Q4_1", 96.6e6, 134.5e6, 30, 0.85), ("q8_0", "Q8_0", 143.0e6, 134.5e6, 30, 1.0),
              ("f16", "F16", 269.1e6, 134.5e6, 30, 1.0), ("f32", "ALL_F32", 538.1e6, 134.5e6, 30, 1.0),
              ("medium", "Q8_0", 224.1e6, 210.8e6, 16, 1.0), ("large", "Q8_0", 985.7e6, 927.5e6, 18, 1.0)]
    widths = [dt.Width(n, b, p, t, {1: dt.predict(terms, n, b, p, L).step_ms * s}, L) for n, t, b, p, L, s in shapes]
    runs = [lesson.ModelRun(lesson.ModelInfo(n, int(p), int(b), t, n_layer=L), [], lesson.TopAnswer("x", 1.0), {})
            for n, t, b, p, L, _ in shapes]
    rows = lesson.model_rows(widths, runs, dt.fit(widths))
    assert [lesson.decode_model_row(r).waits_on for r in rows] == [
        "compute-bound", "mixed", "memory-bound", "memory-bound", "mixed", "mixed"]
    notes = " ".join(lesson.model_notes(rows, dt.fit(widths), None, lesson.spark_terms()))
    assert "Here: memory-bound f16, f32; compute-bound q4_1; mixed q8_0, medium, large." in notes


def test_servers_are_up_at_once_only_where_the_models_fit_together(lesson):
    """Turns need every model in memory at once: within MEMORY_SHARE (half) of the available memory together,
    and a run that measured that way (a run recorded before turns replays one model after another)."""
    def planned(*gb: float) -> list:
        return [lesson.Planned(f"m{i}", lesson.ModelInfo(f"m{i}", 1, int(g * 1e9), "Q8_0"), ()) for i, g in enumerate(gb)]

    turns = hand_context(LESSON, QueuedServer({}), host_values={lesson.IN_TURNS: True})
    assert lesson.in_turns(turns, planned(1.0, 0.9), 4_000_000_000) is True      # 1.9 GB ≤ 2 GB
    assert lesson.in_turns(turns, planned(1.0, 1.1), 4_000_000_000) is False     # 2.1 GB > 2 GB
    assert lesson.in_turns(turns, planned(0.1), None) is False                   # the memory unknown
    before = hand_context(LESSON, QueuedServer({}), host_values={})
    assert lesson.in_turns(before, planned(0.1), 4_000_000_000) is False


def test_a_slow_prefill_sample_is_an_outlier_not_the_range(lesson):
    """Prefills of 500, 510, 490, 505 and one of 50 tokens/s: the 50 is beyond 5 scaled MADs, so the median is that
    of the other four, 502.5, and the range 490-510; 2 × 100 M × 502.5 = 100.5 GFLOP/s and 1.99 ms a token, against
    decode's 100 M × 25 ps = 2.5 ms."""
    from bytesup.course import decodetime as dt
    run = lesson.ModelRun(lesson.ModelInfo("q4", 100_000_000, 60_000_000, "Q4_1"), [], lesson.TopAnswer("x", 1.0), {},
                          [500.0, 510.0, 490.0, 505.0, 50.0])
    (p,) = lesson.prefill_points([run, lesson.ModelRun(run.info, [], run.answer, {})], dt.Terms(50.0, 25.0, 0.1, ()))
    row = lesson.prefill_row(p)
    assert (row.median, row.low, row.high) == (502.5, 490.0, 510.0)
    assert row.gflops == pytest.approx(100.5) and row.ms_per_token == pytest.approx(1.99, abs=1e-3)
    assert row.decode_arithmetic_ms == pytest.approx(2.5) and row.decode_over_prefill == pytest.approx(2.5 * 502.5 / 1e3)


def test_prefills_are_recorded_without_the_decode_model(lesson):
    """Two models are too few to fit the decode-time model: the prefill table is left out, its samples are not."""
    ctx = hand_context(LESSON, QueuedServer({}), host_values={})
    plan = lesson.SamplePlan(1, 5, (2, 4), lesson.PrefillPlan(1, 5, 128))
    runs = [lesson.ModelRun(lesson.ModelInfo(n, 1, 1, "Q8_0"), [], lesson.TopAnswer("x", 1.0), {}, p)
            for n, p in (("a", [500.0] * 5), ("b", []))]
    lesson.record_prefill(ctx, runs, plan)
    lesson.show_prefill(ctx, runs, None, plan)
    result = ctx.finish()
    assert [(m.name, m.settings, m.samples) for m in result.measurements] == [
        ("prefill_tokens_per_s", {"preset": "a", "prompt_tokens": 128}, [500.0] * 5)]
    assert not [t for t in result.tables if t.name == "prefill_per_width"]
