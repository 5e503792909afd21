"""Lesson 4's plan (store.plans.lesson04) and how its view shows a record by declared columns (store.views.lesson04)."""

from __future__ import annotations

import types

import pytest

from bytesup.errors import BytesupError

from bytesup.store.facts.lesson04 import FilePass, NumpyOutcome, NumpyPass, NumpyToken, PromptAgreement, ShownToken
from bytesup.store.plans.lesson04 import PROMPTS, VERSION, NumpyFiles, Plan, f32_server, fresh, from_older, long_prompt_length, read
from bytesup.store.plans import upgrades
from bytesup.store.plans.stopping import StoppingRule
from bytesup.store.views import lesson04
from bytesup.store.views import page

SERVED = {"file": "m.gguf", "path": "/m.gguf", "sha256": "ab"}


def test_a_run_recorded_before_plans_is_read_from_its_host_values():
    # The first runs: no option_prompts, no numpy pass, no llama-bench; --repeat 1 still times two runs of each.
    first = from_older({"repeat": 1})
    assert first == Plan(prompts=PROMPTS, repeat=2, numpy=None, llama_bench=False)
    # A run with the numpy pass and a prompt of its own.
    numpy = from_older({"repeat": 3, "option_prompts": ["1, 2, 3,"], "numpy_plan": {"served": SERVED, "f32": None}})
    assert numpy.prompts[-1] == ("top8_prompt_1", "1, 2, 3,") and len(numpy.prompts) == 5 and numpy.repeat == 3
    assert numpy.numpy == NumpyFiles(served=SERVED, f32=None) and numpy.llama_bench is False
    # llama-bench's first turn recorded: the run had the third clock.
    assert from_older({"repeat": 2, "llama_bench_before": {"available": False, "why": "x"}}).llama_bench is True


def test_a_fresh_plan_is_this_version_and_reads_back_as_recorded():
    plan = fresh(["a"], 5, NumpyFiles(served=SERVED, f32=None))
    assert (plan.version, plan.repeat, plan.llama_bench, plan.prompts[-1]) == (VERSION, 5, True, ("top8_prompt_1", "a"))
    assert read(plan.model_dump(mode="json")) == plan
    # The run's rule (ctx.samples) gives at least MIN_REPEAT; a plan with fewer is a mistake in the lesson.
    with pytest.raises(ValueError, match="at least 2 times, not 1"):
        fresh(None, 1, NumpyFiles(served=None, f32=None))
    with pytest.raises(BytesupError, match=r"^The plan lesson 04 recorded .*: samples: extra inputs are not permitted\."):
        read({**plan.model_dump(mode="json"), "samples": 3})  # a field no version has
    # An older run whose repeat is not a whole number: refused, not taken as two.
    with pytest.raises(BytesupError, match="repeat: input should be a valid integer"):
        from_older({"repeat": "three"})


def test_a_version_3_plan_is_read_as_the_run_that_recorded_it_asked():
    """Version 4 put the long prompt under a stopping rule and llama-bench before and after it, after a short prefill;
    a plan recorded at version 3 keeps `repeat` long requests and llama-bench's three turns after its own warm-up."""
    v3 = {"version": 3, "prompts": [list(p) for p in PROMPTS], "repeat": 3, "numpy": None, "llama_bench": True}
    plan = read(v3)
    assert (plan.version, plan.long, plan.bench_turns, plan.bench_warmup_tokens) == (3, None, ("before", "between", "after"),
                                                                                    None)
    assert "long_prompt_stopped" not in plan.settings(2048, 1921)  # its settings as they were
    # Version 4, as a run made now records it: the long prompt up to --repeat requests, at least two.
    now = fresh(None, 3, NumpyFiles(served=None, f32=None))
    assert (now.version, now.bench_turns, now.bench_warmup_tokens) == (4, ("before", "after"), 32)
    assert now.long == StoppingRule(minimum=2, maximum=3, tight=0.05, budget_s=30.0)
    assert read(now.model_dump(mode="json")) == now
    assert now.settings(2048, 1921, {"samples": 2})["long_prompt_stopped"] == {"samples": 2}
    # A run before plans reads as before version 4 too.
    assert from_older({"repeat": 2, "llama_bench_before": {}}).bench_turns == ("before", "between", "after")


def test_the_f32_widths_server_is_one_slot_of_256_tokens():
    from pathlib import Path

    shape = f32_server(Path("/m/smollm2-135m-f32.gguf"))
    assert shape.argv() == ["-c", "256", "--parallel", "1"]  # the flags recorded runs started it with
    assert shape.to_json() == {"model": "smollm2-135m-f32.gguf", "slots": 1, "context": 256, "extra": [], "native": False}


def test_settings_and_the_long_prompt_by_hand():
    plan = fresh(None, 3, NumpyFiles(served=None, f32=None))
    settings = plan.settings(n_ctx=2048, n_long=1921)
    assert list(settings) == ["top8", "server_probabilities", "timed", "short_prompt", "long_prompt_tokens", "n_ctx", "repeat"]
    assert settings["timed"] == {"temperature": 0, "seed": 42, "cache_prompt": False, "ignore_eos": True, "n_predict": 32}
    assert (settings["long_prompt_tokens"], settings["n_ctx"], settings["repeat"]) == (1921, 2048, 3)
    # 2048 − 32 − 16 = 2000 leaves room for the published 1,921; 1024 − 48 = 976 does not; 10 − 48 < 1 gives 1.
    assert long_prompt_length(2048) == 1921
    assert long_prompt_length(1024) == 976 and long_prompt_length(10) == 1


def test_a_record_is_shown_by_its_declared_columns():
    tokens = [ShownToken(1, 5, "' Paris'", 0.5, -0.6931, 0.5002), ShownToken(2, 7, "' the'", 0.25, -1.386, None)]
    heads, rows = page.by_columns(ShownToken, lesson04.TOP_COLUMNS, tokens)
    # Both probabilities are the server's: each column is named for which answer gave it, not one "probability"
    # beside a "server probability".
    assert heads == [("rank", ""), ("token", ""), ("e^logprob", "%"), ("server's prob", "%"), ("logprob", "")]
    # Fractions shown in percent: 0.5 → 50, 0.5002 → 50.02; None stays None.
    assert rows == [[1, "' Paris'", 50.0, 100 * 0.5002, -0.6931], [2, "' the'", 25.0, None, -1.386]]
    heads, rows = page.by_columns(NumpyToken, ["token", "difference"], [NumpyToken(1, 5, "'x'", 0.4, 0.3, 0.4 - 0.3)],
                                  {"token": str.upper})
    assert heads == [("token", ""), ("numpy − server", "points")] and rows == [["'X'", 100 * (0.4 - 0.3)]]


def test_a_stated_agreement_keeps_the_view_out_of_the_fact():
    a = PromptAgreement(numpy_top_id=5, server_top_id=5, top_agrees=True, set_agrees=False, largest_abs_dp=0.01,
                        kl_shared=0.002, shared=7, probabilities_of_server_ids={"5": 0.49}, largest_abs_logit=20.0,
                        name="t", prompt="p", n_tokens=3, numpy=[NumpyToken(1, 5, "'x'", 0.49, 0.5, -0.01)])
    part = FilePass(file="m.gguf", weight_type="Q4_1", prompts={"t": a}).model_dump(mode="json")
    assert list(part["prompts"]["t"]) == ["numpy_top_id", "server_top_id", "top_agrees", "set_agrees", "largest_abs_dp",
                                          "kl_shared", "shared", "probabilities_of_server_ids", "largest_abs_logit"]
    back = FilePass.model_validate(part).prompts["t"]
    assert back.largest_abs_dp == 0.01 and back.prompt is None and back.numpy is None


def test_the_table_of_upgrades_applies_in_order_what_a_run_recorded():
    table: upgrades.Table = {
        3: ("c", "z", lambda plan, old: {**plan, "parts": plan["parts"] + ["c"]}),
        1: ("a", None, lambda _, old: {"parts": ["a"], "n": old["n"]}),
        2: ("b", "y", lambda plan, old: {**plan, "parts": plan["parts"] + ["b"], "n": plan["n"] + old["y"]}),
    }
    assert upgrades.apply(table, {"n": 1}) == {"parts": ["a"], "n": 1}
    assert upgrades.apply(table, {"n": 1, "z": 0}) == {"parts": ["a", "c"], "n": 1}          # 2 not recorded: skipped
    assert upgrades.apply(table, {"n": 1, "y": 10, "z": 0}) == {"parts": ["a", "b", "c"], "n": 11}  # by number
    assert upgrades.shown_by(table) == ["z", "y"]


class _Page:
    """Where a view writes, kept in order: ("table", name, rows, notes), ("note", text) and ("plot", name)."""

    def __init__(self):
        self.written = []

    def table(self, name, title, columns, rows, notes=None):
        self.written.append(("table", name, rows, notes or []))
        return types.SimpleNamespace(detail=False)

    def note(self, text):
        self.written.append(("note", text))

    def plot(self, name, title, x_label, y_label, series, **kw):
        self.written.append(("plot", name))


def test_the_numpy_pass_is_shown_without_its_f32_width_when_that_file_is_not_here():
    from bytesup.course.nexttoken import LastOnly, ThroughTheLayers

    a = PromptAgreement(numpy_top_id=5, server_top_id=5, top_agrees=True, set_agrees=True, largest_abs_dp=0.002,
                        kl_shared=1e-6, shared=8, probabilities_of_server_ids={"5": 0.498}, largest_abs_logit=20.0,
                        name="t", prompt="p", n_tokens=3, server_token="' Paris'", server_p=0.5,
                        numpy_token="' Paris'", numpy_p=0.498, at_token="' Paris'", at_server=0.5, at_numpy=0.498,
                        numpy=[NumpyToken(1, 5, "' Paris'", 0.498, 0.5, 0.498 - 0.5)])
    done = NumpyOutcome(FilePass(file="m.gguf", weight_type="Q4_1", prompts={"t": a}), prompt_n=[3],
                        f32_missing="The numpy pass over m-f32.gguf is not recomputed: no file here.",
                        last=[LastOnly("t", 3, 10, 4, 0.0, True)],
                        layers=[ThroughTheLayers("t", 5, "' Paris'", [2, 1], [0.3, 0.498])])
    page = _Page()
    lesson04.show_numpy_pass(page, done, {"t": "p"})
    assert [w[1] for w in page.written] == ["numpy_vs_server_main", "numpy_vs_server", "numpy_t", done.f32_missing,
                                            "last_position_only", "answer_through_the_layers_main",
                                            "answer_through_the_layers", "answer_through_the_layers", "numpy_vs_server"]
    # The agreement's row: the server's 50% against numpy's 49.8%, |Δp| 0.002 = 0.2 points; every column in the full
    # table, eight of them in the main text.
    assert page.written[1][2] == [["'p'", 3, "' Paris'", 50.0, "' Paris'", 49.8, True, True, 0.2, "' Paris'", 1e-6, 8]]
    assert page.written[0][2] == [["'p'", "' Paris'", 50.0, "' Paris'", 49.8, True, 0.2, "' Paris'"]]
    # The layers in the main text: rank 2 after block 1 (30%), first from block 2, 49.8% after the last.
    assert page.written[5][2] == [["'p'", "' Paris'", 2, 30.0, 2, 49.8]]
    assert done.fact() == NumpyPass(recomputed=True, why_not=None, served=done.served, f32=None)
    before = _Page()
    lesson04.show_numpy_pass(before, None, {})
    said = "This run was recorded before lesson 4 computed the forward pass in numpy, so it is not recomputed here."
    assert before.written == [("note", said)]
