"""Speculative decoding: the server flags, the draft counters parsed from recorded answers
(scripts/record_speculative_fixtures.py), the arithmetic of `bytesup.course.speculative` and lesson 5b
against hand-computed values,
and `bytesup check`'s claim that speculation leaves the text unchanged."""

from __future__ import annotations

import math

import pytest

from bytesup.check import checker
from bytesup.course import speculative
from bytesup.lesson import NOT_INHERITED
from bytesup.llama import embedded, process, responses
from bytesup.run.lessons import load_lesson
from bytesup.store.plans.lesson05b import REPETITIVE, SHORT, current

from conftest import load_fixture
from test_check import lesson as made_lesson, only, run_of


def completion(name: str) -> responses.Completion:
    return responses.parse(responses.Completion, load_fixture(name)["response"], path="/completion")


@pytest.fixture(scope="module")
def l5():
    return load_lesson("05b_speculative_decoding")


# --- the arithmetic, by hand -------------------------------------------------------------------

def test_expected_tokens_per_pass():
    assert speculative.expected_tokens_per_pass(4, 0.0) == 1
    assert speculative.expected_tokens_per_pass(8, 1.0) == 9
    # 1 + 0.5 + 0.25 + 0.125
    assert speculative.expected_tokens_per_pass(3, 0.5) == pytest.approx(1.875)
    # a = 55/62, k = 8: (1 − a⁹) ÷ (1 − a)
    a = 55 / 62
    assert speculative.expected_tokens_per_pass(8, a) == pytest.approx((1 - a ** 9) / (1 - a))
    assert speculative.expected_tokens_per_pass(8, a) == pytest.approx(5.844, abs=5e-4)


def test_acceptance_and_tokens_per_target_pass():
    assert speculative.acceptance_rate(62, 55) == pytest.approx(0.887097, abs=1e-6)
    assert math.isnan(speculative.acceptance_rate(0, 0))
    assert speculative.target_passes(64, 55) == 9
    assert speculative.tokens_per_target_pass(64, 55) == pytest.approx(64 / 9)
    assert speculative.tokens_per_target_pass(64, 0) == 1          # no speculation: one token a pass
    assert speculative.tokens_per_target_pass(64, 61) == pytest.approx(64 / 3)


def test_predicted_speedup():
    # Free draft, check costs one pass: the speed-up is the tokens per pass.
    assert speculative.predicted_speculative_speedup(4.0, 3.0, 0.0, 20.0) == pytest.approx(4.0)
    # 7 tokens per pass, 7 drafted at 8 ms each, target pass 20 ms: 7 × 20 ÷ (56 + 20)
    assert speculative.predicted_speculative_speedup(7.0, 7.0, 8.0, 20.0) == pytest.approx(140 / 76)
    # The check costs 50 ms instead of one 20 ms pass: 7 × 20 ÷ (56 + 50)
    assert speculative.predicted_speculative_speedup(7.0, 7.0, 8.0, 20.0, 50.0) == pytest.approx(140 / 106)
    # A draft as dear as the target never pays: at best (every draft accepted) it breaks even.
    assert speculative.predicted_speculative_speedup(5.0, 4.0, 20.0, 20.0) == pytest.approx(1.0)
    assert speculative.predicted_speculative_speedup(4.0, 4.0, 20.0, 20.0) == pytest.approx(0.8)


def test_batch_pass_cost_on_the_line_through_two_prompt_passes():
    # 5 tokens in 100 ms, 105 tokens in 600 ms: 5 ms per extra token.
    assert speculative.batch_pass_ms(9, (5, 100.0), (105, 600.0), 20.0) == pytest.approx(120.0)
    assert speculative.batch_pass_ms(1, (5, 100.0), (105, 600.0), 20.0) == pytest.approx(80.0)
    # never below one decode pass
    assert speculative.batch_pass_ms(1, (5, 30.0), (105, 600.0), 40.0) == 40.0


def test_first_difference():
    assert speculative.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert speculative.first_difference([1, 9, 3], [1, 2, 3]) == 1
    assert speculative.first_difference([1, 2], [1, 2, 3]) == 2
    assert speculative.first_difference([1, 2, 3], [1, 2]) == 2
    assert speculative.first_difference([], []) is None


def test_the_checker_and_the_lesson_share_one_first_difference(l5):
    from bytesup.check import claims

    assert claims.first_difference is speculative.first_difference
    assert l5.speculative.first_difference is speculative.first_difference


def test_counts_by_hand():
    # (predicted_n, draft_n, draft_n_accepted): 64 tokens with 40 drafted and 30 accepted, 64 with 50 and 34,
    # and a plain answer of 64 that reports no counters.
    c = speculative.counts([(64, 40, 30), (64, 50, 34), (64, None, None)])
    assert (c.generated, c.drafted, c.accepted, c.reported) == (192, 90, 64, True)
    assert c.passes == 128 and c.tokens_per_pass == 1.5 and c.drafted_per_pass == 90 / 128
    silent = speculative.counts([(64, None, None)])
    assert not silent.reported and math.isnan(silent.acceptance) and silent.tokens_per_pass == 1.0


def test_predict_by_hand():
    # 128 tokens in 64 passes with 90 drafted: 2 tokens a pass, 1.40625 drafted a pass; acceptance 64 ÷ 90.
    c = speculative.Counts(generated=128, drafted=90, accepted=64, reported=True)
    p = speculative.predict(c, 4, 5.0, 20.0, (5, 40.0), (105, 540.0))
    a = 64 / 90
    assert p.expected == pytest.approx(1 + a + a ** 2 + a ** 3 + a ** 4)
    # the check of 2.40625 tokens on the line 40 ms + 5 ms per token from 5 tokens: 27.03125 ms
    assert p.check_cost == pytest.approx(27.03125 / 20) and p.draft_cost == 0.25
    assert p.ideal == pytest.approx(40 / (1.40625 * 5 + 20)) and p.predicted == pytest.approx(40 / (1.40625 * 5 + 27.03125))


def test_model_costs_by_hand(l5):
    """A target of 0.5 GB decoding 63 tokens in 1,575, 1,260 and 1,050 ms (40, 50, 60 tokens/s: a pass of 20 ms,
    0.5 GB × 50 = 25 GB/s) and a draft of 0.1 GB at 200 tokens/s (5 ms, a quarter of a target pass, 20 GB/s)."""
    plan = current(2).model_copy(update={"targets": ["t"], "drafts": ["d"]})
    models = {"t": {"weight_type": "F32", "tensor_bytes": 500_000_000}, "d": {"weight_type": "Q4_1", "tensor_bytes": 100_000_000}}
    plain = {("t", SHORT): [hand_completion(ms) for ms in (1575.0, 1260.0, 1050.0)],
             ("d", SHORT): [hand_completion(315.0)]}
    target, draft = l5.model_costs(plan, models, plain)
    assert (target.model, target.role, target.weights, target.bytes_per_token) == ("t", "target", "F32", 500_000_000)
    assert (target.decode.median, target.decode.min, target.decode.max) == pytest.approx((50.0, 40.0, 60.0))
    assert (target.one_pass, target.over_target, target.weights_read) == pytest.approx((20.0, 1.0, 25.0))
    assert (draft.role, draft.decode.median, draft.one_pass) == ("draft", pytest.approx(200.0), pytest.approx(5.0))
    assert (draft.over_target, draft.weights_read) == pytest.approx((0.25, 20.0))


def test_spec_flags(l5):
    assert l5.spec_flags("ngram-simple") == ["--spec-type", "ngram-simple"]
    assert l5.spec_flags("draft-simple", "/m/d.gguf", 4) == [
        "--spec-type", "draft-simple", "--spec-draft-model", "/m/d.gguf", "--spec-draft-n-max", "4"]


# --- the lesson's speculative figures on hand-made timings -------------------------------------------

def hand_completion(predicted_ms: float, draft_n=None, accepted=None, tokens=(1, 2, 3, 4), prompt_ms=40.0, prompt_n=5):
    timings = {"prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": 64, "predicted_ms": predicted_ms}
    if draft_n is not None:
        timings |= {"draft_n": draft_n, "draft_n_accepted": accepted}
    return responses.Completion(content="", tokens=list(tokens), timings=timings)


def test_speculative_figures_by_hand(l5):
    # Two repeats of 64 tokens: 40 drafted, 30 accepted; 50 drafted, 34 accepted.
    spec = [hand_completion(630.0, 40, 30), hand_completion(700.0, 50, 34)]
    plain = [hand_completion(1260.0), hand_completion(1260.0)]
    counts = l5.spec_counts(spec)
    assert (counts.generated, counts.drafted, counts.accepted) == (128, 90, 64)
    assert counts.acceptance == 64 / 90                       # accepted ÷ drafted = 0.711
    assert counts.passes == 64                                # 128 − 64 tokens took a target pass each
    assert counts.tokens_per_pass == 2.0                      # 128 ÷ 64
    assert counts.drafted_per_pass == 90 / 64                 # 1.40625
    cfg = l5.SpecConfig("t", "draft-simple", "d", 4, SHORT)
    plan = current(2)
    row = l5.spec_row(plan, cfg, spec, plain)
    # 63 decode passes in 630 ms: 100 tokens/s; in 700 ms: 90; plain 63 in 1,260 ms: 50. Speed-up 95 ÷ 50.
    assert (row.decode.median, row.decode.min, row.decode.max) == (95.0, 90.0, 100.0) and row.speedup == 1.9
    assert (row.drafted, row.accepted, row.acceptance, row.tokens_per_pass) == (90, 64, 64 / 90, 2.0)
    assert row.same_tokens == "identical" and row.label == "spec-t-draft-d-k4"
    # One pass: target 1000 ÷ 50 = 20 ms, draft 5 ms. Prompt passes: 5 tokens in 40 ms, 105 in 540 ms
    # (5 ms per extra token), so a check of 1.40625 + 1 = 2.40625 tokens costs 40 + 5 × (2.40625 − 5) = 27.03125 ms.
    arith = l5.spec_arithmetic(plan, cfg, counts, row.speedup, {"t": 20.0, "d": 5.0},
                               {SHORT: (5, 40.0), REPETITIVE: (105, 540.0)})
    a = 64 / 90
    expected = 0.0
    for i in range(4 + 1):                                    # 1 + a + a² + a³ + a⁴
        expected += a ** i
    assert arith.acceptance == a and arith.k == 4 and arith.expected == pytest.approx(expected)
    assert arith.draft_cost == 0.25 and arith.check_cost == pytest.approx(27.03125 / 20)
    # ideal: 2 × 20 ÷ (1.40625 × 5 + 20) = 40 ÷ 27.03125; predicted: 40 ÷ (7.03125 + 27.03125) = 40 ÷ 34.0625
    assert arith.ideal == pytest.approx(40 / 27.03125) and arith.predicted == pytest.approx(40 / 34.0625)
    assert arith.over_predicted == pytest.approx(1.9 / (40 / 34.0625))
    assert arith.label == "d k=4"
    # a repeat whose third token differs from the plain run's
    differing = [spec[0], hand_completion(700.0, 50, 34, tokens=(1, 2, 9, 4))]
    other = l5.spec_row(plan, cfg, differing, plain)
    assert other.same_tokens == "differ from token 3"
    record = l5.run_record(other, differing)
    assert record.draft_n == [40, 50] and record.draft_n_accepted == [30, 34] and record.tokens[1] == [1, 2, 9, 4]
    assert record.server_flags == ["--spec-type", "draft-simple", "--spec-draft-model", "d", "--spec-draft-n-max", "4"]


def test_ngram_figures_by_hand(l5):
    # n-grams: no draft model (no draft cost), k is the m-gram limit; a run with no counters drafted nothing.
    cfg = l5.SpecConfig("t", "ngram-simple", None, None, REPETITIVE)
    assert cfg.label == "spec-t-ngram-simple" and current(2).prompt_name(cfg.prompt) == "repetitive"
    plain = [hand_completion(1260.0)]
    plan = current(2)
    silent = l5.spec_row(plan, cfg, [hand_completion(1260.0)], plain)
    counts = l5.spec_counts([hand_completion(1260.0)])
    assert not counts.reported and silent.acceptance is None and silent.tokens_per_pass == 1 and silent.drafted == 0
    assert silent.label == "spec-t-ngram-simple" and silent.speedup == 1.0
    arith = l5.spec_arithmetic(plan, cfg, counts, silent.speedup, {"t": 20.0},
                               {SHORT: (5, 40.0), REPETITIVE: (105, 540.0)})
    assert arith.expected is None and arith.draft_cost == 0 and arith.k == l5.NGRAM_DRAFT_MAX
    # drafted 0 per pass: the check is one token, 40 + 5 × (1 − 5) = 20 ms, one target pass; speed-up 1
    assert arith.check_cost == 1.0 and arith.ideal == 1.0 and arith.predicted == 1.0


# --- the draft counters in recorded answers ------------------------------------------------------

def test_draft_counters_parsed_from_a_recorded_answer():
    t = completion("completion_spec_draft_short").timings
    raw = load_fixture("completion_spec_draft_short")["response"]["timings"]
    assert (t.draft_n, t.draft_n_accepted) == (raw["draft_n"], raw["draft_n_accepted"])
    assert 0 < t.draft_n_accepted <= t.draft_n
    assert t.predicted_n == 64
    # The raw record keeps every field the server sent.
    assert set(raw) <= set(t.model_dump())


def test_no_counters_without_speculation():
    for name in ("completion_spec_plain_short", "completion_decode"):
        t = completion(name).timings
        assert t.draft_n is None and t.draft_n_accepted is None


def test_lesson_counts_from_recorded_answers(l5):
    draft = completion("completion_spec_draft_short")
    raw = load_fixture("completion_spec_draft_short")["response"]["timings"]
    counts = l5.spec_counts([draft, draft])
    n, d, a = raw["predicted_n"], raw["draft_n"], raw["draft_n_accepted"]
    assert counts.reported and (counts.generated, counts.drafted, counts.accepted) == (2 * n, 2 * d, 2 * a)
    assert counts.acceptance == pytest.approx(a / d)
    assert counts.tokens_per_pass == pytest.approx(n / (n - a))
    assert counts.drafted_per_pass == pytest.approx(d / (n - a))
    plain = l5.spec_counts([completion("completion_spec_plain_short")])
    assert not plain.reported and plain.drafted == 0 and plain.tokens_per_pass == 1


@pytest.mark.parametrize("spec,plain", [("completion_spec_draft_short", "completion_spec_plain_short"),
                                        ("completion_spec_ngram_repetitive", "completion_spec_plain_repetitive")])
def test_recorded_speculative_text_equals_plain(spec, plain):
    """Recorded at temperature 0: the speculative answer's tokens are the plain answer's."""
    s, p = completion(spec), completion(plain)
    assert load_fixture(spec)["request"]["json"] == load_fixture(plain)["request"]["json"]
    assert s.tokens and s.tokens == p.tokens and s.content == p.content
    assert s.timings.draft_n_accepted > 0


# --- the server's flags ----------------------------------------------------------------------------

def test_llama_server_spellings_reach_xllamacpp():
    pytest.importorskip("xllamacpp")
    import xllamacpp

    args = embedded.build_parser().parse_args([
        "-m", "t.gguf", "-t", "2", "-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
        "--spec-draft-n-min", "2", "--draft-p-min", "0.5", "-td", "1", "--spec-draft-ngl", "0"])
    p = embedded.make_params(args)
    spec = p.speculative
    assert list(spec.types) == [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    assert spec.draft.mparams.path == "d.gguf"
    assert (spec.draft.n_max, spec.draft.n_min, spec.draft.n_gpu_layers) == (8, 2, 0)
    assert spec.draft.p_min == pytest.approx(0.5)
    assert spec.draft.cpuparams.n_threads == 1 and spec.draft.cpuparams_batch.n_threads == 1
    for spelling in ("--spec-draft-model", "--model-draft"):
        assert embedded.build_parser().parse_args(["-m", "t", spelling, "x.gguf"]).spec_draft_model == "x.gguf"


def test_ngram_and_none_and_defaults():
    pytest.importorskip("xllamacpp")
    import xllamacpp

    kinds = xllamacpp.common_speculative_type
    p = embedded.make_params(embedded.build_parser().parse_args(
        ["-m", "t", "-t", "3", "--spec-type", "ngram-simple,ngram-mod", "--spec-ngram-simple-size-n", "4"]))
    assert list(p.speculative.types) == [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE, kinds.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    assert p.speculative.ngram_simple.size_n == 4
    assert p.speculative.draft.cpuparams.n_threads == 3           # the draft decodes with --threads
    plain = embedded.make_params(embedded.build_parser().parse_args(["-m", "t", "-md", "d.gguf"]))
    # As with llama-server: a draft model alone does not turn speculation on.
    assert list(plain.speculative.types) == [kinds.COMMON_SPECULATIVE_TYPE_NONE]


def test_unknown_spec_type_is_refused(capsys):
    with pytest.raises(SystemExit):
        embedded.build_parser().parse_args(["-m", "t", "--spec-type", "draft-magic"])
    assert "draft-magic" in capsys.readouterr().err


def test_engine_aliases_and_what_lessons_inherit():
    flags = process.parse_flags(["-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
                                "--draft-p-min", "0.3", "-td", "2", "-ngld", "0", "--model-draft=e.gguf"])
    assert flags == {"--spec-draft-model": "e.gguf", "--spec-type": "draft-simple", "--spec-draft-n-max": "4",
                     "--spec-draft-p-min": "0.3", "--spec-draft-threads": "2", "--spec-draft-ngl": "0"}
    # Every canonical name is a flag python -m bytesup.llama.embedded accepts, so the same flags go to either engine.
    accepted = {s for a in embedded.build_parser()._actions for s in a.option_strings}
    assert process.SPECULATIVE_FLAGS <= accepted
    # A lesson's own servers decode plainly unless the lesson itself asks for speculation.
    assert process.SPECULATIVE_FLAGS <= NOT_INHERITED


def test_speculation_support_of_the_embedded_engine(monkeypatch):
    pytest.importorskip("xllamacpp")
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setattr(process.shutil, "which", lambda name: None)
    found = process.speculation_support()
    assert found["engine"] == "embedded" and found["supported"] is True and found["reason"] == ""


# --- the check: speculative output equals plain output -------------------------------------------

def spec_record(tokens_by_label: dict[str, list[list[int]]], temperature=0) -> dict:
    runs = []
    for label, tokens in tokens_by_label.items():
        kind = "none" if label == "plain" else ("ngram-simple" if "ngram" in label else "draft-simple")
        prompt = "repetitive" if "rep" in label else "short"
        runs.append({"label": label, "target": "t-f32", "spec_type": kind, "draft": None, "draft_n_max": None,
                     "prompt": prompt, "tokens": tokens})
    return {"temperature": temperature, "runs": runs}


def with_spec(record: dict | None):
    res = made_lesson("05b_speculative_decoding")
    if record is not None:
        res.settings["speculative"] = record
    return res


def test_check_passes_when_every_token_matches(tmp_path):
    rec = spec_record({"plain": [[1, 2, 3, 4]], "draft-k4": [[1, 2, 3, 4], [1, 2, 3, 4]], "draft-k8": [[1, 2, 3, 4]],
                       "plain-rep": [[7, 8]], "ngram-rep": [[7, 8]]})
    rec["runs"][3]["spec_type"] = "none"
    claim = only(checker.check_run(run_of(tmp_path, with_spec(rec)), []), "speculative_equals_plain")
    assert claim.status == checker.PASS, claim
    assert claim.observed.startswith("4 of 4 speculative generations identical")


def test_check_fails_on_one_different_token(tmp_path):
    rec = spec_record({"plain": [[1, 2, 3, 4]], "draft-k4": [[1, 2, 3, 4], [1, 2, 9, 4]]})
    claim = only(checker.check_run(run_of(tmp_path, with_spec(rec)), []), "speculative_equals_plain")
    assert claim.status == checker.FAIL
    assert "draft-k4 repeat 2: first differs at token 3 of 4" in claim.detail
    short = spec_record({"plain": [[1, 2, 3, 4]], "draft-k4": [[1, 2, 3]]})
    assert only(checker.check_run(run_of(tmp_path, with_spec(short)), []), "speculative_equals_plain").status == checker.FAIL


def test_check_not_applicable_without_speculative_runs(tmp_path):
    assert only(checker.check_run(run_of(tmp_path, with_spec(None)), []), "speculative_equals_plain").status == checker.NA
    warm = spec_record({"plain": [[1]], "draft": [[1]]}, temperature=0.8)
    assert only(checker.check_run(run_of(tmp_path, with_spec(warm)), []), "speculative_equals_plain").status == checker.NA
    lonely = spec_record({"draft": [[1]]})
    claim = only(checker.check_run(run_of(tmp_path, with_spec(lonely)), []), "speculative_equals_plain")
    assert claim.status == checker.NA and "draft" in claim.detail
