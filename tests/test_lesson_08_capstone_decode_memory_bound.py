"""Lesson 8: tokens/s, bytes per token, effective GB/s and efficiency on hand-made answers worked out
here, and the sweep table, the verdicts and the fit recomputed from the recorded run, replayed to the same files byte
for byte. The lesson's parts below it (its plan, its figures' arithmetic and its view) are tested on their own in
tests/test_lesson08.py."""

from __future__ import annotations

import contextlib
import re
import math
from collections import defaultdict

from pathlib import Path

import numpy as np
import pytest
from lessonkit import QueuedServer, hand_context, recorded_exchanges

from bytesup.course import decodetime, memory_bound
from bytesup.errors import BytesupError
from bytesup.llama.responses import Timings, decode_tokens_per_s
from bytesup.store.facts.lesson08 import ModelInfo, ModelRun, TopAnswer, prefill_rows
from bytesup.store.plans.lesson08 import (BATCH_SEED_BASE, DEFAULT_SIZES, Served, batch_bodies, current_plan, in_turns,
                                          parse_sizes, read_plan)
from bytesup.store.views.lesson08 import show_prefill

LESSON = "08_capstone_decode_memory_bound"
WIDTHS = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")


@pytest.fixture(scope="module")
def _replayed(tmp_path_factory):
    """The recording replayed with the trained model's four widths here (built the first time), so the accuracy of
    each width is recomputed from its file."""
    from lessonkit import replay

    from bytesup.models.catalog import ensure_model

    for name in WIDTHS:
        ensure_model(name)
    return replay(LESSON, tmp_path_factory.mktemp("replay"))


@pytest.fixture
def no_models(tmp_path, monkeypatch):
    """An empty models/ folder: the hand-made sweeps below name the trained model's widths at paths that do not
    exist, so no width file is found and the accuracy says it is not recomputed (tested apart)."""
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path / "no-models"))


def col(table, name: str) -> int:
    return [c.name for c in table.columns].index(name)


def measured_rows(result):
    return [r for r in result.table("sweep").rows if "published" not in r[0]]


def test_the_fixture_replays_through_the_parts_byte_for_byte(result):
    """`result` is the fixture replayed, its JSON and Markdown the recorded ones byte for byte (lessonkit.replay): the
    parts of tests/test_lesson08.py put together give the same tables."""
    assert [t.name for t in result.tables] == ["models_main", "models", "sweep_main", "sweep", "quantization", "steps",
                                               "bandwidth_fit", "decode_model_main", "decode_model",
                                               "arithmetic_per_type_main", "arithmetic_per_type",
                                               "prefill_per_width_main", "prefill_per_width", "bytes_model_with_context"]
    # the main tables show at most 8 columns, each a column of its full table under Details
    for t in result.tables:
        if t.name.endswith("_main"):
            full = result.table(t.name.removesuffix("_main"))
            assert full.detail and len(t.columns) <= 8 and {c.name for c in t.columns} <= {c.name for c in full.columns}


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
    plan = read_plan(result.host_values)
    speeds, together, prefills = defaultdict(list), defaultdict(list), defaultdict(list)
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/completion" and "n_probs" not in e["request"]:
            assert e["request"]["temperature"] == 0 and e["request"]["cache_prompt"] is False
            tps = decode_tokens_per_s(Timings(**e["response"]["timings"]))
            name = e["server"].removeprefix("preset-")
            if isinstance(e["request"]["prompt"], list):  # a prefill: token ids, one token generated
                assert plan.prefill is not None and len(e["request"]["prompt"]) == plan.prefill.tokens
                assert e["request"]["n_predict"] == 1
                t = e["response"]["timings"]
                prefills[name].append(1e3 * t["prompt_n"] / t["prompt_ms"])
            elif "id_slot" in e["request"]:
                together[(name, (e["request"]["seed"] - BATCH_SEED_BASE) // 100)].append(tps)
            else:
                speeds[name].append(tps)
    for m in result.measurements:
        if m.name == "decode_tokens_per_s":
            recorded = speeds[m.settings["preset"]]
            assert len(recorded) == plan.warmup + plan.samples and plan.samples >= 5
            assert m.samples == pytest.approx(recorded[plan.warmup:])
        if m.name == "decode_tokens_per_s_per_sequence":
            assert sorted(m.samples) == pytest.approx(sorted(together[(m.settings["preset"], m.settings["parallel"])]))
        if m.name == "prefill_tokens_per_s":
            recorded = prefills.pop(m.settings["preset"])
            assert plan.prefill is not None
            assert m.samples == pytest.approx(recorded[plan.prefill.warmup:]) and len(m.samples) >= 5
    assert {P for _, P in together} == set(plan.levels)
    assert not prefills  # every timed prefill is a measurement


def test_verdicts_follow_the_rules(result, lesson):
    """The sweep's line is memory_bound.analyse of the recorded points, and its verdict column is the decode-time
    model's: the waits-on column of the model's table, one verdict per width, and the same in the sweep's sentence."""
    t = result.table("sweep")
    rows = measured_rows(result)
    llc = {r[0]: r[col(t, "cache-resident")] == "yes" for r in rows}
    points = []
    for r in rows:
        m = next(x for x in result.measurements if x.name == "decode_tokens_per_s" and x.settings["preset"] == r[0])
        info = result.host_values[f"model_{r[0]}"]
        p = memory_bound.make_point(r[0], r[col(t, "bytes per token")], m.samples, None, n_params=info["n_params"])
        p["cache_resident"] = llc[r[0]]
        points.append(p)
    analysis = memory_bound.analyse(points)
    model = result.table("decode_model")
    waits = {r[0]: r[col(model, "waits on")] for r in model.rows}
    for r in rows:
        assert r[col(t, "on the line")] == ("yes" if analysis["line"][r[0]]["on_line"] else "no")
        assert r[col(t, "verdict")] == waits[r[0]]
    fit = result.table("bandwidth_fit").rows[0]
    assert fit[1] == pytest.approx(analysis["fit"]["gbs"]) and fit[0].startswith("the line's bandwidth")
    (verdict,) = [n for n in result.table("sweep_main").notes if n.startswith("Verdict")]
    for v in set(waits.values()):
        assert f"{v}: {', '.join(n for n in waits if waits[n] == v and 'published' not in n)}" in verdict
    # the steps name no verdict
    steps = result.table("steps")
    assert not any("bound" in str(r[-1]) for r in steps.rows)


def test_bandwidth_is_the_runs(result):
    bw = result.measurement("read_bandwidth_gb_per_s")
    assert len(bw.samples) >= 10


def test_plot_is_log_log(result):
    p = next(p for p in result.plots if p.name == "decode_vs_bytes")
    assert p.log_x and p.log_y
    measured = p.series[0]
    assert measured.y_min is not None and all(lo <= y <= hi for lo, y, hi in zip(measured.y_min, measured.y, measured.y_max, strict=True))


def test_what_the_run_shows_is_the_records(result):
    """The opening's crossovers are the conclusion's, one per weight type whose arithmetic the steps showed, each the
    per-type table's B × c; each model's verdict is the decode-time model's table's, with its bytes per parameter from
    the models table."""
    assert result.shows.plot == "decode_vs_bytes"
    crossovers = re.search(r"B × c = (.+?) bytes per parameter", result.notes[0]).group(1)
    assert f"its arithmetic at B × c = {crossovers} bytes per parameter by weight type" in result.shows.text
    per_type = result.table("arithmetic_per_type")
    seen = [r for r in per_type.rows if r[col(per_type, "c")] is not None]
    assert [r[0] for r in seen] == ["Q4_1", "Q8_0", "F16"]
    assert crossovers.split(", ") == [
        f"{r[0]} {r[col(per_type, 'crossover B × c')]:.3g} ({r[col(per_type, 'mixed from')]:.3g}–"
        f"{r[col(per_type, 'mixed to')]:.3g})" for r in seen]
    model, models = result.table("decode_model"), result.table("models")
    per_param = {r[0]: r[col(models, "bytes per parameter")] for r in models.rows}
    waits = {r[0]: r[col(model, "waits on")] for r in model.rows if r[0] in per_param}
    words = {"memory-bound": "on memory", "compute-bound": "on the arithmetic", "mixed": "mixed"}
    for verdict in set(waits.values()):
        named = ", ".join(f"{n} ({per_param[n]:.3g})" for n in waits if waits[n] == verdict)
        assert re.search(re.escape(named) + r" (waits?|is|are) " + words[verdict], result.shows.text), verdict
    assert f"fitted on {len(waits)} models" in result.shows.text


# --- the sweep's models: the sizes (bytesup.store.plans.lesson08) ------------------------------------

def test_parse_sizes():
    assert parse_sizes(None, DEFAULT_SIZES) == list(DEFAULT_SIZES)
    assert DEFAULT_SIZES[:4] == ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")
    assert parse_sizes("tiny-q8_0, small-q8_0", DEFAULT_SIZES) == ["tiny-q8_0", "small-q8_0"]
    assert parse_sizes(["medium-f16"], DEFAULT_SIZES) == ["medium-f16"]
    with pytest.raises(BytesupError, match="huge-q8_0"):
        parse_sizes("tiny-q8_0,huge-q8_0", DEFAULT_SIZES)
    # Blank names are dropped, not reported.
    assert parse_sizes("tiny-q8_0, ,", DEFAULT_SIZES) == ["tiny-q8_0"]
    from bytesup.models.catalog import model_names
    known = ", ".join(model_names())
    with pytest.raises(BytesupError) as err:
        parse_sizes("huge-q8_0,tiny-q8_0,gigantic", DEFAULT_SIZES)
    assert str(err.value) == f"Unknown model(s) huge-q8_0, gigantic in --sizes. Models: {known}, or a path to a .gguf file."
    with pytest.raises(BytesupError) as err:
        parse_sizes(" , ", DEFAULT_SIZES)
    assert str(err.value) == f"Unknown model(s) (none given) in --sizes. Models: {known}, or a path to a .gguf file."


def test_sizes_take_gguf_paths(tmp_path):
    gguf = tmp_path / "mine-q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert parse_sizes(f"tiny-q8_0,{gguf}", DEFAULT_SIZES) == ["tiny-q8_0", str(gguf)]
    with pytest.raises(BytesupError, match="No GGUF file at /nowhere/x.gguf in --sizes"):
        parse_sizes("/nowhere/x.gguf", DEFAULT_SIZES)


# --- main on hand-made answers ---------------------------------------------------------------

def _decode(ms: float) -> dict:
    """A timed decode: 33 tokens, so 32 passes in `ms`: 32,000 ÷ ms tokens/s."""
    return {"content": "", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 33, "predicted_ms": ms}}


def _top(logprob: float) -> dict:
    return {"content": " Paris", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 1, "predicted_ms": 0.0},
            "completion_probabilities": [{"id": 7, "token": " Paris", "logprob": logprob, "top_logprobs": [
                {"id": 7, "token": " Paris", "logprob": logprob}, {"id": 8, "token": " the", "logprob": -2.5}]}]}


def _header(name: str, n_params: int, tensor_bytes: int, weight_type: str, n_layer: int = 30) -> dict:
    return {"preset": name, "name": name, "path": f"/models/{name}.gguf", "architecture": "llama", "n_layer": n_layer,
            "n_embd": 576, "n_params": n_params, "tensor_bytes": tensor_bytes, "weight_type": weight_type}


# Our own servers on this host's CPU: the sweep runs here, and the host's bandwidth feeds decode.
LOCAL = {"url_host": "127.0.0.1", "local": True, "model_readable": True, "accelerators": [], "on_accelerator": False,
         "host_bandwidth_applies": True, "reason": "by hand"}


def _sweep(*headers: dict) -> dict:
    """The host values of a sweep of these models (--sizes) on our own servers, with 16 GB of memory available."""
    return {"server_facts": LOCAL, "option_sizes": ",".join(h["name"] for h in headers), "option_bandwidth_gbs": None,
            "available_memory_bytes": 16_000_000_000, **{f"model_{h['name']}": h for h in headers}}


def _bandwidth(samples=(11.0, 12.0, 13.0)) -> dict:
    return {"threads": 2, "bytes_per_thread": 512 * 2**20, "bytes_per_sample": 1024 * 2**20, "method": "by hand",
            "gb_per_s": {"samples": list(samples), "median": sorted(samples)[len(samples) // 2], "min": min(samples),
                         "max": max(samples)},
            "llc_bytes": 128 * 2**20, "llc_source": "by hand"}


def test_main_sweep_on_hand_made_answers(no_models, lesson):
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

    def local_server(label, shape):
        started.append((label, shape.model, shape.argv()))
        return contextlib.nullcontext(servers[label].server)

    # 100,000,000 parameters: 1.0625 bytes each (q8_0), 2 bytes each (f16); large: 9 GB > half of 16 GB.
    host_values = _sweep(_header(q8, 100_000_000, 106_250_000, "Q8_0"), _header(f16, 100_000_000, 200_000_000, "F16"),
                         _header(large, 9_000_000_000, 9_000_000_000, "Q8_0"))
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
    assert "Skipped for memory: large-q8_0 (9 GB), more than 50% of the 16 GB available." in result.table("models_main").notes

    t = result.table("sweep")
    q8_row, f16_row, pub_row = t.rows
    expect = {
        "decode": (90.0, 45.0), "decode min": (80.0, 40.0), "decode max": (100.0, 50.0),
        # effective = tokens/s × bytes per token: 90 × 106.25e6 = 9.5625 GB/s; 45 × 200e6 = 9.0 GB/s.
        "effective": (9.5625, 9.0), "effective min": (8.5, 8.0), "effective max": (10.625, 10.0),
        # ÷ the run's bandwidth, 12 GB/s (the median of 11, 12, 13).
        "efficiency": (100 * 9.5625 / 12, 75.0), "efficiency min": (100 * 8.5 / 12, 100 * 8 / 12),
        "efficiency max": (100 * 10.625 / 12, 100 * 10 / 12),
        "server's top token probability": (77.105, 77.880),  # e^−0.26, e^−0.25
    }
    for name, (a, b) in expect.items():
        assert (q8_row[col(t, name)], f16_row[col(t, name)]) == pytest.approx((a, b), abs=1e-3), name
    assert q8_row[col(t, "server's top token")] == f16_row[col(t, "server's top token")] == "' Paris'"
    # Two models are too few for the decode-time model's three terms: no verdict, and the sweep says why.
    assert q8_row[col(t, "verdict")] is None and f16_row[col(t, "verdict")] is None
    assert ("No verdict per width: the decode-time model could not be fitted (the terms need at least 3 "
            "models; 2 measured)") in " ".join(result.table("sweep_main").notes)
    assert "decode_model" not in {x.name for x in result.tables}
    assert result.notes[0].startswith("Conclusion: this run cannot say where its decode waits on memory")
    assert result.shows.text.endswith("It measured smollm2-135m-q8_0 90 tokens/s at 106 MB per token (9.56 GB/s read); "
                                      "smollm2-135m-f16 45 tokens/s at 200 MB per token (9 GB/s read).")
    assert pub_row[col(t, "effective")] == pytest.approx(237.712)
    eff = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_efficiency"}
    # Each sample: 80 × 106.25e6 ÷ 12e9 = 70.83%, 100 × 106.25e6 ÷ 12e9 = 88.54%; 40 × 2e8 ÷ 12e9 = 66.67%, 83.33%.
    assert eff == {q8: pytest.approx([70.8333, 88.5417], abs=1e-4), f16: pytest.approx([66.6667, 83.3333], abs=1e-4)}
    decode = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s"}
    assert decode == {q8: pytest.approx([80.0, 100.0]), f16: pytest.approx([40.0, 50.0])}

    steps = result.table("steps").rows
    assert len(steps) == 1 and steps[0][:2] == [q8, f16]
    assert steps[0][2:5] == pytest.approx([200 / 106.25, 2.0, 2.0 / (200 / 106.25)])
    # 200e6 ÷ 106.25e6 = 1.882 × the bytes for 90 ÷ 45 = 2 × the speed, within the 25% spread: followed the bytes.
    assert steps[0][-1] == memory_bound.FOLLOWS

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
    assert any("20 GB/s given with --bandwidth-gbs" in n for n in result.table("sweep_main").notes)
    assert "Only the one model the user's server serves was measured" in " ".join(result.table("models_main").notes)


# --- the decode-time model -----------------------------------------------------------------------

# Five models made by hand from B = 50 GB/s, f = 1/15 ms per block (2 ms in 30 blocks) and one c per weight type:
# Q4_1 20 ps, Q8_0 25 ps; F32's arithmetic hidden under its reading. Steps at P = 1:
#   smollm2-135m-q4_1: 75 MB, 100 M parameters, 30 blocks: read 1.5 ms, arithmetic 2 ms: 2 + 2 = 4 ms (arithmetic)
#   smollm2-135m-q8_0: 106.25 MB, 100 M, 30 blocks: read 2.125 ms, arithmetic 2.5 ms: 4.5 ms (arithmetic)
#   smollm2-135m-f32: 400 MB, 100 M, 30 blocks: read 8 ms: 10 ms (memory)
#   large-q8_0: 1,000 MB, 1,000 M, 30 blocks: read 20 ms, arithmetic 25 ms: 27 ms (arithmetic)
#   medium-f32: 800 MB, 200 M, 15 blocks: read 16 ms, fixed 1 ms: 17 ms (memory)
# The two F32 models fix B and f, each Q8_0 model gives the other its c, and q4_1, alone in its type, is not held out.
Q4, Q8, F32, BIG, MF32 = "smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f32", "large-q8_0", "medium-f32"
HAND_HEADERS = (_header(Q4, 100_000_000, 75_000_000, "Q4_1"), _header(Q8, 100_000_000, 106_250_000, "Q8_0"),
                _header(F32, 100_000_000, 400_000_000, "F32"), _header(BIG, 1_000_000_000, 1_000_000_000, "Q8_0"),
                _header(MF32, 200_000_000, 800_000_000, "F32", n_layer=15))
HAND_STEP_MS = {Q4: 4.0, Q8: 4.5, F32: 10.0, BIG: 27.0, MF32: 17.0}


@pytest.mark.parametrize("in_turns", [False, True])
def test_main_decode_model_on_hand_made_step_times(no_models, lesson, in_turns):
    """The five models above (see also tests/test_decodetime.py), large-q8_0 10% slower than its terms; the first of
    each weight type also at P = 2 and 4. One model after another (a run recorded before the plan, its turns and
    prefills), or, as the plan of a run made now says, every server up at once and the timed decodes in turns: each
    server gets the same requests in the same order, and the tables are the same; that run also times a 128-token
    prefill on the first model of each weight type."""
    q4, q8, f32, big, mf32 = Q4, Q8, F32, BIG, MF32
    # large-q8_0 measured at 29.7 ms, 10% slower than its 27. 32 passes per decode.
    step = {q4: {1: 4.0, 2: 9.0, 4: 12.0}, q8: {1: 4.5, 2: 10.0, 4: 14.0}, f32: {1: 10.0, 2: 14.0, 4: 18.0}}

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
    for name, ms in ((big, 29.7), (mf32, HAND_STEP_MS[mf32])):  # not the first of their type: no batches, no prefill
        servers[f"preset-{name}"] = QueuedServer({"/completion": [_top(-0.3), _decode(1.0),
                                                                  *[timed(name, 32 * ms)] * 5]})
    started = []

    def local_server(label, shape):
        started.append(shape.argv())
        return contextlib.nullcontext(servers[label].server)

    host_values = {
        **_sweep(*HAND_HEADERS),
        "matvec_bandwidth": {"threads": 2, "bytes_per_sample": 536_870_912, "gb_per_s":
                             {"samples": [40.0] * 5, "median": 40.0, "min": 39.0, "max": 41.0}},
    }
    if in_turns:  # the plan a run records now (--repeat 2 gives the five samples of the rule)
        host_values["plan"] = current_plan(5).model_dump(mode="json")
    else:  # a run recorded before plans: its sample plan, no turns, no prefill
        host_values["sample_plan"] = {"warmup": 1, "samples": 5, "levels": [2, 4]}
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = local_server
    result = lesson.main(ctx)
    assert all(s.left() == {} for s in servers.values())
    # Each server's warm-up, after its answer: 8 tokens under the plan of today (version 8), 32 before it.
    warmups = {[b for _, path, b in s.requests if path == "/completion"][1]["n_predict"] for s in servers.values()}
    assert warmups == ({8} if in_turns else {32})
    names = [q4, q8, f32, big, mf32]
    assert order == (names * 5 if in_turns else [n for n in names for _ in range(5)])
    prefill_t = next((t for t in result.tables if t.name == "prefill_per_width"), None)
    if not in_turns:
        assert prefill_t is None and not [m for m in result.measurements if m.name == "prefill_tokens_per_s"]
    else:
        assert prefill_t is not None
        pre = {r[0]: r for r in prefill_t.rows}
        assert list(pre) == [q4, q8, f32]  # large-q8_0 is not the first of its weight type
        # q4_1: 500 tokens/s, 2 × 100 M × 500 = 100 GFLOP/s, 2 ms a token; decode's arithmetic 100 M × Q4_1's c
        # (about 20 ps; about 23 in this fit, see below) = about 2 ms, so about 1 × a token of prefill; q8_0: 1,000
        # tokens/s, 1 ms a token against 100 M × about 25 ps, about 2.5 ×; f32: 2,000 tokens/s, and no decode
        # arithmetic (F32's c is hidden).
        assert pre[q4][2:8] == [500.0, 500.0, 500.0, pytest.approx(100.0), 2.0, pytest.approx(2.0, rel=0.2)]
        assert pre[q4][8] == pytest.approx(pre[q4][7] / 2.0)
        assert pre[q8][6] == 1.0 and pre[q8][7] == pytest.approx(2.5, rel=0.15) and pre[q8][8] == pre[q8][7]
        assert pre[f32][2] == 2000.0 and pre[f32][7:9] == [None, None]
        assert [m.settings for m in result.measurements if m.name == "prefill_tokens_per_s"] == [
            {"preset": n, "prompt_tokens": 128} for n in (q4, q8, f32)]
        firsts = [s for n, s in servers.items() if n not in (f"preset-{big}", f"preset-{mf32}")]
        assert all(s.requests[-6][2]["prompt"] == list(range(128)) for s in firsts)
        notes = " ".join(result.table("prefill_per_width_main").notes)
        assert "5 timed prefills after 1 warm-up, from the server's prompt_ms" in notes
        assert f"takes {pre[q4][8]:.2g}× ({q4}) to {pre[q8][8]:.2g}× ({q8}) the time of a token of prefill" in notes
        assert f"No decode arithmetic beside {f32} (F32): its type's c is hidden under the reading." in notes
    assert started[0][-4:] == ["-c", "1024", "--parallel", "4"]  # four slots of 256 tokens
    batch = [b for _, path, b in servers[f"preset-{q8}"].requests if path == "/completion"][7:21]
    # three batches of 2 and two of 4 (the order within a batch is the threads')
    assert sorted(b["id_slot"] for b in batch[:6]) == [0, 0, 0, 1, 1, 1]
    assert sorted(b["id_slot"] for b in batch[6:]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({b["seed"] for b in batch}) == 14  # each request of a batch its own seed
    # The warm-up is not a sample: 32 passes in 128 ms, 250 tokens/s, five times.
    decode = {m.settings["preset"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s"}
    assert decode[q4] == pytest.approx([250.0] * 5)

    t = result.table("decode_model")
    rows = {r[0]: r for r in t.rows}
    assert rows[q8][col(t, "step at P = 2")] == pytest.approx(10.0) and rows[big][col(t, "step at P = 2")] is None
    # the batch line through (2, 9) and (4, 12) ms: 1.5 ms per sequence, 6 ms at P = 0
    assert rows[q4][col(t, "batch line t₀")] == pytest.approx(6.0) and rows[q4][col(t, "batch line Δt")] == pytest.approx(1.5)
    # The fit's terms come back near those the steps were made from: q4_1 read 1.5 ms, fixed 2 ms (large-q8_0's 10%,
    # taken up partly by g, the fixed cost's growth with the bytes per parameter, pulls it to about 1.67); q4_1, alone in
    # its type, takes its c from what the fixed cost leaves of its 4 ms step.
    assert rows[q4][col(t, "read the weights")] == pytest.approx(1.5, rel=0.05)
    assert rows[q4][col(t, "fixed")] == pytest.approx(2.0, rel=0.2)
    assert rows[q4][col(t, "arithmetic")] + rows[q4][col(t, "fixed")] == pytest.approx(4.0)
    # large by the other four alone: q8_0 gives Q8_0's c, the F32 models B and f: 2 + max(20, 25) = 27 ms, 37.04
    # tokens/s, against 1000 ÷ 29.7 = 33.67: +10%
    assert rows[big][col(t, "predicted")] == pytest.approx(1000 / 27, rel=0.02)
    assert rows[big][col(t, "predicted ÷ measured − 1")] == pytest.approx(10.0, abs=2.0)
    # q8_0 by large's c alone: 29.7 = 2 + 1,000 M × c, c = 27.7 ps: 2 + 2.77 = 4.77 ms against 4.5: −5.7%
    assert rows[q8][col(t, "predicted ÷ measured − 1")] == pytest.approx(4.5 / 4.77 * 100 - 100, abs=1.0)
    assert rows[q4][col(t, "predicted")] is None  # alone in its weight type
    assert [rows[n][col(t, "waits on")] for n in (q4, q8, f32, big, mf32)] == [
        "compute-bound", "compute-bound", "memory-bound", "compute-bound", "memory-bound"]
    # One verdict per width: the sweep's column is the model's.
    sweep_t = result.table("sweep")
    assert {r[0]: r[col(sweep_t, "verdict")] for r in measured_rows(result)} == {
        n: rows[n][col(t, "waits on")] for n in (q4, q8, f32, big, mf32)}
    # c per weight type and its crossover B × c: Q4_1 about 20 ps (50 GB/s × 20 ps = 1 byte per parameter, above
    # q4_1's 0.75), Q8_0 about 25 ps (1.25, above q8_0's 1.0625 and large's 1), each within 20% (large-q8_0's 10%
    # raises Q8_0's, and the lower f it brings raises Q4_1's, to 23.3); F32 hidden: c 0, at most 4 bytes per parameter ÷ B,
    # about 80 ps. The plot marks each seen type's at 100 M parameters × B × c.
    per_type = result.table("arithmetic_per_type")
    typed = {r[0]: r for r in per_type.rows}
    assert list(typed) == ["Q4_1", "Q8_0", "F32"]
    b_fit = float(re.search(r"B = ([0-9.]+) GB/s", " ".join(result.table("arithmetic_per_type_main").notes)).group(1))
    assert typed["Q4_1"][col(per_type, "c")] == pytest.approx(20.0, rel=0.2)
    assert typed["Q8_0"][col(per_type, "c")] == pytest.approx(25.0, rel=0.15)
    assert typed["F32"][col(per_type, "c")] is None
    assert typed["F32"][col(per_type, "c at most (hidden)")] == pytest.approx(4 / b_fit * 1e3, rel=0.01)
    plot = next(p for p in result.plots if p.name == "decode_vs_bytes")
    for kind, low, high in (("Q4_1", 0.75, 2.0), ("Q8_0", 1.0625, 2.0)):
        row = typed[kind]
        crossover = row[col(per_type, "crossover B × c")]
        assert crossover == pytest.approx(row[col(per_type, "c")] * b_fit / 1e3, rel=0.01)
        assert low < row[col(per_type, "mixed from")] <= crossover <= row[col(per_type, "mixed to")] < high
        u = row[col(per_type, "its standard error u")]
        assert row[col(per_type, "mixed from")] <= crossover - 2 * u and crossover + 2 * u <= row[col(per_type, "mixed to")]
        marker = next(s for s in plot.series if s.label.startswith(f"{kind}'s crossover"))
        assert marker.x[0] == marker.x[1] == pytest.approx(100 * crossover)
    assert not [s for s in plot.series if s.label.startswith("F32's crossover")]
    assert result.notes[1] == (f"Decode waits on memory where a model stores more bytes per parameter than its type's "
                               f"crossover, clear of its band and of its own steps' scatter: {f32} (4), {mf32} (4); "
                               f"their weights take longer to read than their arithmetic takes.")
    assert result.notes[2].startswith(f"It waits on the arithmetic where a model stores fewer bytes per parameter than "
                                      f"its type's crossover, clear of its band and of its own steps' scatter: {q4} "
                                      f"(0.75), {q8} (1.06), {big} (1);")
    assert rows[f32][col(t, "read share")] > 75  # 8 of about 10 ms
    spark = rows[next(n for n in rows if "published" in n)]
    assert spark[col(t, "read the weights")] == pytest.approx(26.2271, abs=1e-4)
    assert spark[col(t, "waits on")] == "memory-bound"
    notes = " ".join(result.table("decode_model_main").notes)
    assert "t₁ = L × (f + g × W ÷ params) + max(W ÷ B, params × c)" in notes and "Fitted on the 5 models" in notes
    assert "Within ±15% of measured: 4 of 4" in notes
    assert f"Not predicted, alone in its weight type: {q4} (its c would come from its own step alone" in notes
    # the fitted B (about 50 GB/s) against numpy's matrix-vector product's 40
    assert b_fit == float(re.search(r"B = ([0-9.]+) GB/s", notes).group(1))
    share = int(re.search(r"537 MB with 2 thread\(s\)\): 40 GB/s, so B is (\d+)% of it", notes).group(1))
    assert 45 < b_fit < 55 and abs(share - 100 * b_fit / 40) <= 1
    fit = result.table("bandwidth_fit")
    assert fit.rows[-1][:4] == ["numpy's float32 matrix-vector product over 537 MB, 2 thread(s), before the decode work",
                                40.0, 39.0, 41.0]
    assert "From one sequence to two the step grows by: smollm2-135m-q4_1 5 ms, then 1.5 ms per sequence" in notes
    fact = result.facts["decode_model"]
    assert fact["widths"][3]["step_ms"] == {"1": pytest.approx(29.7)} and fact["tolerance"] == 0.15
    per_seq = [m for m in result.measurements if m.name == "decode_tokens_per_s_per_sequence"]
    assert {(m.settings["preset"], m.settings["parallel"], len(m.samples)) for m in per_seq} == {
        (q4, 2, 6), (q4, 4, 8), (q8, 2, 6), (q8, 4, 8), (f32, 2, 6), (f32, 4, 8)}


def test_an_old_recording_replays_without_the_model(no_models, lesson):
    """A recording made before the sample plan: no warm-up, ctx.repeat decodes, no lines, no model table."""
    q8 = "smollm2-135m-q8_0"
    server = QueuedServer({"/completion": [_top(-0.3), _decode(400.0), _decode(320.0)]})
    host_values = _sweep(_header(q8, 100_000_000, 106_250_000, "Q8_0"))
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = lambda label, shape: contextlib.nullcontext(server.server)
    result = lesson.main(ctx)
    assert server.left() == {}
    assert "decode_model" not in {t.name for t in result.tables} and "decode_model" not in result.facts
    assert "sample_plan" not in result.host_values and "plan" not in result.host_values


def test_an_old_recording_of_five_models_gets_its_verdicts_without_a_fact(no_models, lesson):
    """A recording made before the sample plan with the five models above (as both committed runs, with their own
    models): no batches, so no fact for `bytesup check`, but the terms fit on the steps at P = 1, so every width gets
    the model's verdict and the page its crossover per weight type and its conclusion."""
    servers = {f"preset-{n}": QueuedServer({"/completion": [_top(-0.3), _decode(32 * ms), _decode(32 * ms)]})
               for n, ms in HAND_STEP_MS.items()}
    host_values = _sweep(*HAND_HEADERS)
    ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values, bandwidth=_bandwidth())
    ctx.local_server = lambda label, shape: contextlib.nullcontext(servers[label].server)
    result = lesson.main(ctx)
    assert all(s.left() == {} for s in servers.values())
    assert "decode_model" not in result.facts and "sample_plan" not in result.host_values
    assert not [m for m in result.measurements if m.name == "decode_tokens_per_s_per_sequence"]
    t = result.table("decode_model")
    waits = {r[0]: r[col(t, "waits on")] for r in t.rows if "published" not in r[0]}
    assert waits == {Q4: "compute-bound", Q8: "compute-bound", F32: "memory-bound", BIG: "compute-bound",
                     MF32: "memory-bound"}
    assert all(r[col(t, "step at P = 2")] is None for r in t.rows)
    sweep_t = result.table("sweep")
    assert {r[0]: r[col(sweep_t, "verdict")] for r in measured_rows(result)} == waits
    assert result.notes[0].startswith("Conclusion. On this machine reading one byte takes 1 ÷ B = ")
    assert ("The model behind these verdicts predicted each of the 4 models it could leave out within ±15% from the "
            f"others' terms ({Q4} could not be left out: no other model shares its weight type).") in result.notes
    assert any(n.startswith("Decode waits on memory where a model stores more bytes per parameter than its type's "
                            "crossover") and f"{F32} (4), {MF32} (4)" in n for n in result.notes)


def test_batch_bodies():
    bodies = batch_bodies(4, 1, 32)
    assert [b["id_slot"] for b in bodies] == [0, 1, 2, 3]
    assert [b["seed"] for b in bodies] == [8410, 8411, 8412, 8413]
    assert all(b["temperature"] == 0 and b["cache_prompt"] is False and b["n_predict"] == 32 for b in bodies)
    plan = current_plan(5)  # five samples: three batches of 2 and two of 4, on four slots of 256 tokens
    assert (plan.samples, plan.rounds(2), plan.rounds(4), plan.slots, plan.context) == (5, 3, 2, 4, 1024)


def test_servers_are_up_at_once_only_where_the_models_fit_together():
    """Turns need every model in memory at once: within MEMORY_SHARE (half) of the available memory together,
    and a plan that measures that way (a run recorded before turns replays one model after another)."""
    def served(*gb: float) -> list:
        return [Served(f"m{i}", ModelInfo(f"m{i}", 1, int(g * 1e9), "Q8_0"), ()) for i, g in enumerate(gb)]

    turns = current_plan(2)
    assert in_turns(turns, served(1.0, 0.9), 4_000_000_000) is True      # 1.9 GB ≤ 2 GB
    assert in_turns(turns, served(1.0, 1.1), 4_000_000_000) is False     # 2.1 GB > 2 GB
    assert in_turns(turns, served(0.1), None) is False                   # the memory unknown
    before = read_plan({"repeat": 2})
    assert in_turns(before, served(0.1), 4_000_000_000) is False


def test_prefills_are_recorded_without_the_decode_model(lesson):
    """Two models are too few to fit the decode-time model: the prefill table is left out, its samples are not."""
    ctx = hand_context(LESSON, QueuedServer({}), host_values={})
    plan = current_plan(2)
    runs = [ModelRun(ModelInfo(n, 1, 1, "Q8_0"), [], TopAnswer("x", 1.0), {}, p)
            for n, p in (("a", [500.0] * 5), ("b", []))]
    lesson.record_prefill(ctx, runs, plan)
    show_prefill(ctx, prefill_rows(runs, decodetime.Terms(50.0, (("Q8_0", 25.0),), 0.1, ())), None, plan)  # no terms: no table
    result = ctx.finish()
    assert [(m.name, m.settings, m.samples) for m in result.measurements] == [
        ("prefill_tokens_per_s", {"preset": "a", "prompt_tokens": 128}, [500.0] * 5)]
    assert not [t for t in result.tables if t.name == "prefill_per_width"]


def test_a_run_records_its_plan_once_and_its_replay_reads_it_back(lesson):
    """Live, the plan a run makes now is recorded as the host value `plan` (with --repeat 7: seven samples); a replay
    of that run reads the same plan back, and a replay of a run recorded before plans reads the plan it followed."""
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    live = LessonContext(LESSON, "live", server=QueuedServer({}).server, run=RunOptions(command=["test"], repeat=7),
                         model_path=None, sink=[], replay=None, progress=Reporter(None, LESSON))
    plan = lesson.recorded_plan(live)
    assert plan == current_plan(7) and plan.samples == 7
    assert live.host_values["plan"] == plan.model_dump(mode="json") and "sample_plan" not in live.host_values
    assert lesson.recorded_plan(hand_context(LESSON, QueuedServer({}), host_values=live.host_values)) == plan
    older = lesson.recorded_plan(hand_context(LESSON, QueuedServer({}), host_values={"repeat": 3}))
    assert (older.warmup, older.samples, older.levels, older.prefill) == (0, 3, (), None)


# --- the accuracy of each width, on hand-made logits ----------------------------------------------------

def _accuracy_runs(*names: str) -> list[ModelRun]:
    return [ModelRun(ModelInfo(n, 100, 100, None, preset=n, path=f"/hand/{n}.gguf"), [10.0], TopAnswer("x", 1.0), {})
            for n in names]


def test_the_accuracy_on_hand_made_logits(lesson):
    """Each width's logits made by hand (29 positions over three tokens): q4_1 the reference's exactly, q8_0 with the
    first position's P = (1/2, 1/4, 1/4) made Q = (1/4, 1/2, 1/4): KL 1/4 ln 2 there, 0 elsewhere."""
    from bytesup.store.plans.lesson08 import accuracy_plan

    q4, q8, f32 = WIDTHS[0], WIDTHS[1], WIDTHS[3]
    plan = accuracy_plan()
    n = sum(len(p.ids) for p in plan.prompts)
    assert n == 29
    ref = np.tile(np.log([0.25, 0.25, 0.5]), (n, 1))
    ref[0] = np.log([0.5, 0.25, 0.25])
    q8_logits = ref.copy()
    q8_logits[0] = np.log([0.25, 0.5, 0.25])
    logits = {f32: ref, q4: ref.copy(), q8: q8_logits}
    asked = []

    def logits_of(path, sha256, ids):
        asked.append((path, sha256, ids))
        return logits[path.rsplit("/", 1)[-1].removesuffix(".gguf")], (b"a", b" b", b"c")

    ctx = hand_context(LESSON, QueuedServer({}))
    found = {q4, q8, f32}
    ctx.file_with = lambda record: Path(record["path"]) if record["file"].removesuffix(".gguf") in found else None
    acc = lesson.quantization_accuracy(ctx, _accuracy_runs(q4, q8, f32, "large-q8_0"), plan, logits_of)
    assert acc is not None and [w.name for w in acc.widths] == [q4, q8, f32]  # the synthetic model is not a width
    assert asked[0] == (f"/hand/{f32}.gguf", catalog_sha(f32), tuple(p.ids for p in plan.prompts))
    by = {w.name: w for w in acc.widths}
    assert by[q4].identical and by[q4].same_top == 29 and by[f32].identical
    w = by[q8]
    assert w.mean_kl == pytest.approx(0.25 * math.log(2) / 29, rel=1e-3) and w.max_kl == pytest.approx(0.1733, rel=1e-3)
    # position 0 (after 'The') has its top token moved; |ΔP| = 0.25 there, at token 0 (' b' is token 1)
    assert (w.same_top, w.largest_dp, w.dp_position, w.dp_prompt, w.dp_token) == (28, 0.25, 1, plan.prompts[0].text, "'a'")
    # the top token after the lesson's prompt (row 4): token 2, 'c', at 1/2
    assert (w.top_token, w.top_probability) == ("'c'", 0.5)

    # The q8_0 file not here: that width says so, the others are recomputed.
    found = {q4, f32}
    acc = lesson.quantization_accuracy(ctx, _accuracy_runs(q4, q8, f32), plan, logits_of)
    assert acc is not None
    gone = {w.name: w.not_recomputed for w in acc.widths}
    assert gone[q4] is None and gone[q8] is not None and "smollm2-135m-q8_0.gguf is not recomputed" in gone[q8]
    # The reference not here: nothing is recomputed, and each width says why.
    found = {q4, q8}
    acc = lesson.quantization_accuracy(ctx, _accuracy_runs(q4, q8, f32), plan, logits_of)
    assert acc is not None and all("against smollm2-135m-f32 over" in (w.not_recomputed or "") for w in acc.widths)
    # The reference not swept; one width alone; no accuracy in the plan.
    acc = lesson.quantization_accuracy(ctx, _accuracy_runs(q4, q8), plan, logits_of)
    assert acc is not None and all("which this run did not sweep" in (w.not_recomputed or "") for w in acc.widths)
    assert lesson.quantization_accuracy(ctx, _accuracy_runs(q4), plan, logits_of) is None
    assert lesson.quantization_accuracy(ctx, _accuracy_runs(q4, f32), None, logits_of) is None


def catalog_sha(name: str) -> str:
    from bytesup.models.smollm2 import REAL_MODELS

    return REAL_MODELS[name].sha256


def test_the_replayed_accuracy_of_the_fixture(result):
    """The fixture's widths recomputed from their files: q4_1 agrees with f32 to the last bit (f32 holds its values),
    f16 and q8_0 do not; each row's size and decode are the models table's and the sweep's."""
    fact = result.facts["quantization_accuracy"]
    by = {w["name"]: w for w in fact["widths"]}
    assert list(by) == list(WIDTHS) and all(w["not_recomputed"] is None for w in by.values())
    assert by[WIDTHS[0]]["mean_kl"] == by[WIDTHS[0]]["largest_dp"] == 0.0
    assert by[WIDTHS[1]]["mean_kl"] > by[WIDTHS[2]]["mean_kl"] > 0.0 and by[WIDTHS[3]]["mean_kl"] == 0.0
    t = result.table("quantization")
    assert len(t.columns) <= 8
    sweep = {r[0]: r for r in measured_rows(result)}
    sweep_t = result.table("sweep")
    for row in t.rows:
        assert row[col(t, "decode")] == sweep[row[0]][col(sweep_t, "decode")]
        assert row[col(t, "size")] == pytest.approx(sweep[row[0]][col(sweep_t, "bytes per token")] / 1e6)


def test_the_page_gives_each_letter_one_quantity():
    """The capstone's page counts a model's parameters as params and its batch line as t₀ + Δt × P: n is the tokens
    of lessons 5 and 6, a lesson 5b's acceptance, b lesson 3's bias, P the sequences of a batch."""
    from lessonkit import recorded

    page = (recorded(LESSON) / f"{LESSON}.md").read_text(encoding="utf-8")  # what the replay writes, byte for byte
    assert "W ÷ params" in page and "params × c" in page and "batch line t₀" in page
    for doubled in (r"÷ n\b", r"\bn × [cB]", r"\(n × ", r"batch line [ab]\b", r"P_f32", r"\ba \+ b × P"):
        assert re.search(doubled, page) is None, doubled
