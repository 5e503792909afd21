"""`bytesup check`'s general claims on hand-made runs: lesson results stating facts, beside
hand-made recorded exchanges shaped like tests/fixtures/runs/04_next_token/http/04_next_token.jsonl.

Every expected number is worked by hand in a comment; each claim gets a run that passes and one
with a planted wrong number that fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bytesup.check import checker
from bytesup.check.compare import Run, load_run
from bytesup.store.results import Column, LessonResult, Measurement, Table

L4, L5, L6, L7 = "04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit"
PROMPT = "The capital of France is"

# ln 0.5, ln 0.25, ln 0.125: e^logprob gives back 0.5, 0.25 and 0.125.
LN_HALF, LN_QUARTER, LN_EIGHTH = -0.6931471805599453, -1.3862943611198906, -2.0794415416798357
# (id, text, logprob) of the three candidates the hand-made server lists, most probable first.
CANDIDATES = [(7042, " Paris", LN_HALF), (260, " the", LN_QUARTER), (4528, " London", LN_EIGHTH)]


# --- hand-made recordings -------------------------------------------------------------------

def completion(prompt: str, request: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    return {"server": "main", "method": "POST", "path": "/completion", "request": {"prompt": prompt, **request},
            "status": 200, "response": {"index": 0, "content": first["token"], "tokens": [], "stop": True,
                                        "prompt": prompt, "completion_probabilities": [first]},
            "elapsed_ms": 1.0}


def utf8(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def logprob_answer(prompt: str, cands: list[tuple[int, str, float]]) -> dict[str, Any]:
    """A /completion with n_probs 8 at temperature 0, post_sampling_probs false: logprobs."""
    listed = [{"id": i, "token": t, "bytes": utf8(t), "logprob": lp} for i, t, lp in cands]
    request = {"n_predict": 1, "n_probs": 8, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}
    return completion(prompt, request, {**listed[0], "top_logprobs": listed})


def prob_answer(prompt: str, cands: list[tuple[int, str, float]], temperature: float = 1.0) -> dict[str, Any]:
    """The same prompt asked with the temperature sampler alone, post_sampling_probs true: probabilities."""
    listed = [{"id": i, "token": t, "bytes": utf8(t), "prob": p} for i, t, p in cands]
    request = {"n_predict": 1, "n_probs": 8, "temperature": temperature, "samplers": ["temperature"], "top_k": 0,
               "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": False, "seed": 42}
    return completion(prompt, request, {**listed[0], "top_probs": listed})


SERVER_PROBS = [(7042, " Paris", 0.5), (260, " the", 0.25), (4528, " London", 0.125)]
RECORDED = [logprob_answer(PROMPT, CANDIDATES), prob_answer(PROMPT, SERVER_PROBS),
            {"server": "main", "method": "GET", "path": "/props", "request": None, "status": 200, "response": {}}]


def token_row(rank: int, id_: int, text: str, probability: float, logprob: float, server: float | None) -> dict[str, Any]:
    return {"rank": rank, "id": id_, "token": repr(text), "probability": probability, "logprob": logprob,
            "server_probability": server}


def top_tokens(probabilities=(0.5, 0.25, 0.125), servers=(0.5, 0.25, 0.125), prompt: str = PROMPT) -> dict[str, Any]:
    rows = [token_row(rank, i, t, p, lp, s)
            for rank, ((i, t, lp), p, s) in enumerate(zip(CANDIDATES, probabilities, servers, strict=True), start=1)]
    return {"top8_capital_of_france": {"prompt": prompt, "tokens": rows}}


def made(lesson_id: str, facts: dict[str, Any] | None = None, measurements=(), tables=(), host_values=None) -> LessonResult:
    return LessonResult(lesson_id=lesson_id, title=lesson_id, started_at="2026-01-01T00:00:00+00:00",
                        finished_at="2026-01-01T00:00:01+00:00", facts=facts or {}, measurements=list(measurements),
                        tables=list(tables), host_values=host_values or {})


def run_of(folder: Path, result: LessonResult, exchanges: list[dict[str, Any]] | None = None) -> Run:
    folder.mkdir(parents=True, exist_ok=True)
    if exchanges is not None:
        (folder / "http").mkdir(exist_ok=True)
        path = folder / "http" / f"{result.lesson_id}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in exchanges), encoding="utf-8")
        result = result.model_copy(update={"exchanges": f"http/{result.lesson_id}.jsonl", "exchange_count": len(exchanges)})
    (folder / f"{result.lesson_id}.json").write_text(json.dumps(result.to_json(), indent=2), encoding="utf-8")
    return load_run(folder)


def only(run: Run, claim_id: str) -> checker.ClaimResult:
    found = [r for r in checker.check_run(run, []).results if r.id == claim_id]
    assert len(found) == 1, found
    return found[0]


# --- lesson 4: the shown tokens against the recorded answers ---------------------------------

def test_facts_that_show_the_recorded_answer_pass(tmp_path):
    run = run_of(tmp_path / "r", made(L4, {"top_tokens": top_tokens()}), RECORDED)
    shown = only(run, "top_tokens_match_server")
    assert shown.status == checker.PASS, shown
    assert shown.observed.startswith("3 tokens in 1 tables (fact top_tokens)")
    assert shown.expected == "the answers recorded in http/04_next_token.jsonl"
    exp = only(run, "probability_is_exp_logprob")
    assert exp.status == checker.PASS and "over 3 tokens" in exp.observed
    # 0.5 + 0.25 + 0.125 = 0.875
    share = only(run, "top8_share_at_most_one")
    assert share.status == checker.PASS and share.observed == "largest share 87.5000% ('The capital of France is')"


def test_probabilities_computed_at_temperature_2_fail(tmp_path):
    # softmax(logprob / 2) over the three: e^(ln p / 2) = √p = 0.70711, 0.5, 0.35355; their sum 1.56066;
    # 0.70711 / 1.56066 = 0.45308, 0.5 / 1.56066 = 0.32037, 0.35355 / 1.56066 = 0.22654.
    at_2 = (0.45308, 0.32037, 0.22654)
    run = run_of(tmp_path / "r", made(L4, {"top_tokens": top_tokens(probabilities=at_2)}), RECORDED)
    shown = only(run, "top_tokens_match_server")
    assert shown.status == checker.FAIL
    assert "top8_capital_of_france rank 1 ' Paris': probability (e^logprob) 0.45308 shown, 0.5 from the recorded answer" in shown.detail
    assert "rank 3 ' London': probability (e^logprob) 0.22654 shown, 0.125 from the recorded answer" in shown.detail
    # |0.22654 − 0.125| ÷ 0.125 = 0.81232, the largest of the three gaps
    assert "largest relative gap 0.81" in shown.observed
    # The server's own numbers are right: the claim about them still passes.
    assert only(run, "probability_is_exp_logprob").status == checker.PASS


def test_a_wrong_server_probability_fails(tmp_path):
    run = run_of(tmp_path / "r", made(L4, {"top_tokens": top_tokens(servers=(0.6, 0.25, 0.125))}), RECORDED)
    shown = only(run, "top_tokens_match_server")
    assert shown.status == checker.FAIL
    assert "rank 1 ' Paris': server probability 0.6 shown, 0.5 from the recorded answer" in shown.detail


def test_a_token_at_another_rank_fails(tmp_path):
    fact = top_tokens()
    rows = fact["top8_capital_of_france"]["tokens"]
    rows[0]["token"], rows[1]["token"] = rows[1]["token"], rows[0]["token"]
    rows[0]["id"], rows[1]["id"] = rows[1]["id"], rows[0]["id"]
    shown = only(run_of(tmp_path / "r", made(L4, {"top_tokens": fact}), RECORDED), "top_tokens_match_server")
    assert shown.status == checker.FAIL
    assert "rank 1 ' the': the recorded answer's token at rank 1 is ' Paris' (id 7042)" in shown.detail


def test_a_prompt_never_asked_fails(tmp_path):
    fact = top_tokens(prompt="The capital of Spain is")
    shown = only(run_of(tmp_path / "r", made(L4, {"top_tokens": fact}), RECORDED), "top_tokens_match_server")
    assert shown.status == checker.FAIL and "no recorded prompt 'The capital of Spain is'" in shown.detail


def test_without_recordings_the_shown_tokens_cannot_be_checked(tmp_path):
    run = run_of(tmp_path / "r", made(L4, {"top_tokens": top_tokens()}))
    shown = only(run, "top_tokens_match_server")
    assert shown.status == checker.NA and "no recorded /completion answers" in shown.detail
    # e^logprob against the shown server probabilities, from the fact itself
    exp = only(run, "probability_is_exp_logprob")
    assert exp.status == checker.PASS and "the lesson's tables" in exp.detail


@pytest.mark.parametrize("fact,message", [
    ([1, 2, 3], "top_tokens: input should be a valid dictionary"),
    ({"t": {"prompt": PROMPT, "tokens": [{"token": "' Paris'", "rank": "one"}]}},
     "top_tokens['t']['tokens'][0]['rank']: input should be a valid integer"),
    ({"t": {"prompt": PROMPT}}, "top_tokens['t']['tokens']: field required"),
])
def test_a_malformed_fact_fails(tmp_path, fact, message):
    run = run_of(tmp_path / "r", made(L4, {"top_tokens": fact}), RECORDED)
    shown = only(run, "top_tokens_match_server")
    assert shown.status == checker.FAIL and message in shown.detail


def test_an_older_runs_table_is_matched_by_its_tokens(tmp_path):
    """No top_tokens fact, no prompt: the table's tokens, in order, find their recorded answer."""
    cols = [Column(name=n, unit=u) for n, u in [("rank", ""), ("token", ""), ("probability", "%"),
                                                 ("server probability", "%"), ("logprob", "")]]
    rows = [[1, "' Paris'", 50.0, 50.0, LN_HALF], [2, "' the'", 25.0, 25.0, LN_QUARTER], [3, "' London'", 12.5, 12.5, LN_EIGHTH]]
    good = Table(name="top8_capital_of_france", title="t", columns=cols, rows=rows)
    assert only(run_of(tmp_path / "a", made(L4, tables=[good]), RECORDED), "top_tokens_match_server").status == checker.PASS
    bad = good.model_copy(deep=True)
    bad.rows[1][2] = 32.037        # the temperature-2 value of ' the', in percent
    shown = only(run_of(tmp_path / "b", made(L4, tables=[bad]), RECORDED), "top_tokens_match_server")
    assert shown.status == checker.FAIL and "rank 2 ' the': probability (e^logprob) 0.32037 shown, 0.25" in shown.detail


# --- lesson 4: the server's own numbers --------------------------------------------------------

def test_server_probabilities_off_e_to_the_logprob_fail(tmp_path):
    # ' London' at 0.12625 = 0.125 × 1.01: relative gap 0.01, ten times the 1e-3 tolerance.
    off = [(7042, " Paris", 0.5), (260, " the", 0.25), (4528, " London", 0.12625)]
    recorded = [logprob_answer(PROMPT, CANDIDATES), prob_answer(PROMPT, off)]
    fact = top_tokens(servers=(0.5, 0.25, 0.12625))
    exp = only(run_of(tmp_path / "r", made(L4, {"top_tokens": fact}), recorded), "probability_is_exp_logprob")
    assert exp.status == checker.FAIL
    assert exp.observed == "largest relative gap 0.01 over 3 tokens"
    assert exp.expected == "p = 0.12625 vs e^logprob = 0.125 ('The capital of France is' token ' London')"


def test_server_probabilities_at_another_temperature_are_not_the_softmax(tmp_path):
    # Asked at temperature 2, the server's probabilities are not e^logprob: that answer is skipped,
    # and the claim falls back to the probabilities the lesson showed (none shown for the server: e^logprob itself).
    at_2 = [(7042, " Paris", 0.45308), (260, " the", 0.32037), (4528, " London", 0.22654)]
    recorded = [logprob_answer(PROMPT, CANDIDATES), prob_answer(PROMPT, at_2, temperature=2.0)]
    fact = top_tokens(servers=(None, None, None))
    exp = only(run_of(tmp_path / "r", made(L4, {"top_tokens": fact}), recorded), "probability_is_exp_logprob")
    assert exp.status == checker.PASS and "the lesson's tables" in exp.detail


def test_a_top8_share_above_one_fails(tmp_path):
    # Candidates at ln 0.5, ln 0.5 and ln 0.25: 0.5 + 0.5 + 0.25 = 1.25 > 1.
    impossible = [(1, " a", LN_HALF), (2, " b", LN_HALF), (3, " c", LN_QUARTER)]
    share = only(run_of(tmp_path / "r", made(L4), [logprob_answer(PROMPT, impossible)]), "top8_share_at_most_one")
    assert share.status == checker.FAIL and share.observed == "largest share 125.0000% ('The capital of France is')"


def test_the_top8_share_counts_eight_candidates(tmp_path):
    # Nine candidates at ln 0.125: the top eight hold 8 × 0.125 = 1.0 (≤ 1); all nine would be 1.125.
    nine = [(i, f" t{i}", LN_EIGHTH) for i in range(9)]
    share = only(run_of(tmp_path / "r", made(L4), [logprob_answer(PROMPT, nine)]), "top8_share_at_most_one")
    assert share.status == checker.PASS and share.observed.startswith("largest share 100.0000%")


# --- lesson 5: sampler comparisons --------------------------------------------------------------

VERDICTS = Table(name="sampler_check", title="s", columns=[Column(name="setting"), Column(name="verdict")],
                 rows=[["greedy", "agree"], ["top-p 0.9", "agree"]])


def comparisons(*rows: tuple[str, float | None, float, bool | None]) -> dict[str, Any]:
    return {"sampler_comparisons": [{"name": n, "max_relative_difference": d, "tolerance": t, "same_tokens": s}
                                    for n, d, t, s in rows]}


def test_sampler_comparisons_within_their_tolerance_pass(tmp_path):
    facts = comparisons(("greedy", 0.0, 1e-5, True), ("top-p 0.9", 4e-6, 1e-5, True), ("top-k 40", None, 1e-5, None))
    claim = only(run_of(tmp_path / "r", made(L5, facts, tables=[VERDICTS])), "sampler_matches_server")
    assert claim.status == checker.PASS
    assert claim.observed == "2 of 2 settings agree; largest max |Δp|/p 4e-06 (top-p 0.9)"
    assert "1 not checked by the lesson" in claim.detail and "from fact sampler_comparisons" in claim.detail


@pytest.mark.parametrize("row,problem", [
    (("top-p 0.9", 3e-3, 1e-5, True), "top-p 0.9: max |Δp|/p 0.003 > tolerance 1e-05"),      # 300 × the tolerance
    (("top-p 0.9", 0.0, 1e-5, False), "top-p 0.9: the kept tokens differ"),
    (("top-p 0.9", 0.1, 0.5, True), "top-p 0.9: tolerance 0.5 looser than check's ceiling 0.001"),
])
def test_a_sampler_difference_fails_whatever_the_verdict_says(tmp_path, row, problem):
    claim = only(run_of(tmp_path / "r", made(L5, comparisons(("greedy", 0.0, 1e-5, True), row), tables=[VERDICTS])),
                 "sampler_matches_server")
    assert claim.status == checker.FAIL and problem in claim.detail
    assert claim.observed.startswith("1 of 2 settings agree")


def test_no_sampler_compared_is_not_applicable(tmp_path):
    claim = only(run_of(tmp_path / "r", made(L5, comparisons(("top-k 40", None, 1e-5, None)))), "sampler_matches_server")
    assert claim.status == checker.NA and "compared no setting (1 not checked)" in claim.detail


# --- lesson 6: KV-cache bytes --------------------------------------------------------------------

SMOLLM2 = {"model_info": {"hyperparameters": {"n_layer": 30, "n_embd": 576, "n_head": 9, "n_head_kv": 3, "head_dim": 64}}}
F16 = {"cache_type_k": "f16", "cache_type_v": "f16"}


def kv_example(label: str, n_layer: int, n_head_kv: int, head_dim: int, element: float, per_token: float) -> dict[str, Any]:
    return {"label": label, "n_layer": n_layer, "n_head_kv": n_head_kv, "head_dim": head_dim,
            "bytes_per_element": element, "bytes_per_token": per_token}


def kv_lesson(per_token: float, examples: list[dict[str, Any]], settings=F16) -> LessonResult:
    ms = [Measurement.of("kv_bytes_per_token", "bytes", [per_token], settings=settings)]
    return made(L6, {"kv_examples": examples}, ms, host_values=SMOLLM2)


# 2 × 30 × 3 × 64 × 2 = 23,040 (SmolLM2-135M, f16); 2 × 80 × 8 × 128 × 2 = 327,680 (the 70B example)
EXAMPLES = [kv_example("served", 30, 3, 64, 2.0, 23040), kv_example("70B example", 80, 8, 128, 2.0, 327680)]


def test_kv_rows_and_the_measurement_recomputed_pass(tmp_path):
    claim = only(run_of(tmp_path / "r", kv_lesson(23040, EXAMPLES)), "kv_bytes_formula")
    assert claim.status == checker.PASS and claim.detail == "3 values recomputed"
    assert "30 layers, 3 KV heads, head width 64, f16/f16" in claim.observed


def test_a_kv_row_off_by_a_factor_2_fails(tmp_path):
    # K and V counted once, not twice: 30 × 3 × 64 × 2 = 11,520 instead of 23,040.
    rows = [kv_example("served", 30, 3, 64, 2.0, 11520), EXAMPLES[1]]
    claim = only(run_of(tmp_path / "r", kv_lesson(23040, rows)), "kv_bytes_formula")
    assert claim.status == checker.FAIL
    assert claim.observed == "11,520 bytes per token (served)" and claim.expected == "23,040 bytes recomputed"


@pytest.mark.parametrize("k,v,per_token", [
    ("q8_0", "f16", 17640),    # 30 × 3 × 64 × (34/32 + 2) = 5,760 × 3.0625 = 17,640
    ("q4_0", "q4_0", 6480),    # 30 × 3 × 64 × (18/32 + 18/32) = 5,760 × 1.125 = 6,480
    ("q5_1", "q4_1", 7920),    # 5,760 × (24/32 + 20/32) = 5,760 × 1.375 = 7,920
])
def test_the_measurement_from_the_gguf_and_cache_types(tmp_path, k, v, per_token):
    good = kv_lesson(per_token, [], settings={"cache_type_k": k, "cache_type_v": v})
    assert only(run_of(tmp_path / "a", good), "kv_bytes_formula").status == checker.PASS
    # The f16 figure where the cache is quantized: fails.
    wrong = kv_lesson(23040, [], settings={"cache_type_k": k, "cache_type_v": v})
    assert only(run_of(tmp_path / "b", wrong), "kv_bytes_formula").status == checker.FAIL


def test_the_cache_type_table_is_checks_own():
    # Block sizes worked from ggml's layouts: bytes per block ÷ numbers per block.
    assert checker.CACHE_TYPE_BYTES == {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 1.0625, "q5_1": 0.75,
                                        "q5_0": 0.6875, "q4_1": 0.625, "q4_0": 0.5625, "iq4_nl": 0.5625}


def test_a_malformed_kv_fact_fails(tmp_path):
    claim = only(run_of(tmp_path / "r", kv_lesson(23040, [{"label": "x", "n_layer": 30}])), "kv_bytes_formula")
    assert claim.status == checker.FAIL and "kv_examples[0]['n_head_kv']: field required" in claim.detail


# --- lesson 7: the ridge point --------------------------------------------------------------------

def test_ridge_point_converts_each_measurements_unit(tmp_path):
    # 0.2 TFLOP/s ÷ 16 GB/s = 2e11 ÷ 1.6e10 = 12.5 FLOPs per byte
    ms = [Measurement.of("matmul_peak_gflop_per_s", "TFLOP/s", [0.2]), Measurement.of("read_bandwidth_gb_per_s", "GB/s", [16.0])]
    ok = made(L7, measurements=ms + [Measurement.of("ridge_point_flops_per_byte", "FLOPs/byte", [12.5])])
    claim = only(run_of(tmp_path / "a", ok), "ridge_point_formula")
    assert claim.status == checker.PASS and claim.expected.startswith("12.5 from the medians")
    # 0.2 ÷ 16 as if both were in the same unit: 0.0125, a factor 1,000 off
    wrong = made(L7, measurements=ms + [Measurement.of("ridge_point_flops_per_byte", "FLOPs/byte", [0.0125])])
    assert only(run_of(tmp_path / "b", wrong), "ridge_point_formula").status == checker.FAIL


# --- lesson 4: the numpy forward pass against the recorded answers ------------------------------

def numpy_fact(top_id: int = 7042, f32_probabilities: dict[int, float] | None = None, logit: float = 16.0) -> dict[str, Any]:
    def part(file: str, probabilities: dict[int, float] | None) -> dict[str, Any]:
        one = {"numpy_top_id": top_id, "server_top_id": 7042, "top_agrees": top_id == 7042, "set_agrees": True,
               "largest_abs_dp": 0.0, "kl_shared": 0.0, "shared": 3, "largest_abs_logit": logit,
               "probabilities_of_server_ids": {str(i): p for i, p in (probabilities or {}).items()}}
        return {"file": file, "weight_type": "F32", "prompts": {"top8_capital_of_france": one}}
    return {"recomputed": True, "why_not": None, "served": part("m-q4_1.gguf", None),
            "f32": part("m-f32.gguf", f32_probabilities) if f32_probabilities is not None else None}


def f32_answer(cands=CANDIDATES) -> dict[str, Any]:
    return {**logprob_answer(PROMPT, cands), "server": "f32"}


def test_numpy_top_token_against_the_recorded_answers(tmp_path):
    run = run_of(tmp_path / "ok", made(L4, {"top_tokens": top_tokens(), "numpy_pass": numpy_fact()}), RECORDED)
    ok = only(run, "numpy_top_token_is_the_servers")
    assert ok.status == checker.PASS and ok.observed == "1 of 1 prompts agree"
    # numpy says ' the' (260), the recorded answer's top candidate is ' Paris' (7042).
    run = run_of(tmp_path / "bad", made(L4, {"top_tokens": top_tokens(), "numpy_pass": numpy_fact(top_id=260)}), RECORDED)
    bad = only(run, "numpy_top_token_is_the_servers")
    assert bad.status == checker.FAIL and bad.observed == "0 of 1 prompts agree"
    assert "numpy's top id 260, the server's 7042 (' Paris')" in bad.detail


def test_numpy_claims_are_not_applicable_without_a_recomputed_pass(tmp_path):
    run = run_of(tmp_path / "old", made(L4, {"top_tokens": top_tokens()}), RECORDED)
    for cid in ("numpy_top_token_is_the_servers", "numpy_f32_within_rounding"):
        assert only(run, cid).status == checker.NA and "recorded before the numpy pass" in only(run, cid).detail
    fact = {"recomputed": False, "why_not": "no file with its recorded sha256", "served": None, "f32": None}
    run = run_of(tmp_path / "gone", made(L4, {"top_tokens": top_tokens(), "numpy_pass": fact}), RECORDED)
    assert only(run, "numpy_top_token_is_the_servers").detail == "the numpy pass was not computed: no file with its recorded sha256"


def test_numpy_on_the_f32_width_within_the_f16_rounding(tmp_path):
    # Largest |logit| 16: the tolerance is 2^-11 × 16 ÷ 4 = 2^-9 = 0.001953125.
    near = {7042: 0.5005, 260: 0.2499, 4528: 0.125}        # |Δp| 0.0005, 0.0001, 0
    run = run_of(tmp_path / "ok", made(L4, {"top_tokens": top_tokens(), "numpy_pass": numpy_fact(f32_probabilities=near)}),
                 RECORDED + [f32_answer()])
    ok = only(run, "numpy_f32_within_rounding")
    assert ok.status == checker.PASS and ok.observed == "largest |Δp| 0.0005 ('The capital of France is' token ' Paris')"
    assert ok.expected.startswith("≤ 0.002,")
    far = {**near, 260: 0.253}                              # |Δp| 0.003 > 0.00195
    run = run_of(tmp_path / "bad", made(L4, {"top_tokens": top_tokens(), "numpy_pass": numpy_fact(f32_probabilities=far)}),
                 RECORDED + [f32_answer()])
    bad = only(run, "numpy_f32_within_rounding")
    assert bad.status == checker.FAIL and "token ' the': |Δp| 0.003 > 0.002" in bad.detail
    # Without an f32 width (a preset, the course's model): not applicable.
    run = run_of(tmp_path / "none", made(L4, {"top_tokens": top_tokens(), "numpy_pass": numpy_fact()}), RECORDED)
    assert only(run, "numpy_f32_within_rounding").status == checker.NA
