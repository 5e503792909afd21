"""What each pass of `bytesup check` is worth: every claim in one group (the course's published figures, the run
against itself, sanity checks, a reference run), counted by group in check.md, check.json and the terminal; and
prefill against decode beside the course's 72×."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from test_check import ALL, lesson, m, only, run_of
from test_compare import assemble_run, invoke

from bytesup.check import checker
from bytesup.check.claims import GENERAL_CLAIMS
from bytesup.check.claims.common import grouped
from bytesup.check.claims.lesson04 import prefill_ratio_reason
from bytesup.check.compare import load_run
from bytesup.check.verdicts import COURSE, GROUPS, ITSELF, REFERENCE, SANITY, ClaimResult

SPARK = "lesson 4 on the DGX Spark"


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> tuple[Path, checker.CheckReport]:
    run = assemble_run(tmp_path_factory.mktemp("groups") / "run", *ALL)
    return run, checker.check_run(load_run(run))


def test_every_result_has_one_group(full):
    _, report = full
    assert {r.group for r in report.results} <= set(GROUPS)
    by_id = {r.id: r.group for r in report.results if r.source == "general"}
    # Bounds any sound run meets are sanity checks, not evidence.
    for cid in ("decode_efficiency_in_unit_interval", "top8_share_at_most_one", "stream_first_token_after_prompt"):
        assert by_id[cid] == SANITY, cid
    assert by_id["decode_memory_bound_per_width"] == COURSE
    for cid in ("verdict_per_width_as_refitted", "probability_is_exp_logprob", "decode_model_predicts_every_width",
                "depth_line_predicts_deeper_depths", "prefill_faster_than_decode", "kv_bytes_formula",
                "stream_one_event_per_token"):
        assert by_id[cid] == ITSELF, cid
    # The course's figures name course figures; the project's own file was taken from a recorded run.
    groups = {r.source: r.group for r in report.results if r.source != "general"}
    assert groups[SPARK] == COURSE
    assert [g for s, g in groups.items() if s != SPARK] == [REFERENCE]


def test_counts_by_group_add_up(full):
    _, report = full
    naive: dict[str, Counter] = {}
    for r in report.results:
        naive.setdefault(r.group, Counter())[r.status] += 1
    by_group = report.counts_by_group()
    assert set(by_group) == set(naive)
    for g, c in by_group.items():
        assert c == {s: naive[g][s] for s in (checker.PASS, checker.FAIL, checker.INCONCLUSIVE, checker.NA)}
    totals = report.counts()
    for status in totals:
        assert sum(c[status] for c in by_group.values()) == totals[status]


def test_check_md_json_and_the_terminal_show_the_groups(full):
    run, report = full
    result = invoke("check", run)
    data = json.loads((run / "check.json").read_text(encoding="utf-8"))
    assert data["counts_by_group"] == {g: c for g, c in json.loads(json.dumps(report.counts_by_group())).items()}
    assert {c["group"] for c in data["claims"]} <= set(GROUPS)
    md = (run / "check.md").read_text(encoding="utf-8")
    assert "What a pass and a fail are worth" in md
    for g, c in report.counts_by_group().items():
        title, shows, fail_shows = GROUPS[g]
        assert (f"| {title} | {c[checker.PASS]} | {c[checker.FAIL]} | {c[checker.INCONCLUSIVE]} | {c[checker.NA]} | "
                f"{shows} | {fail_shows} |") in md
    assert "### Sanity checks: bounds any sound run meets" in md and "## Reference run: " in md
    assert f"## Published figures: {SPARK}" in md
    # The terminal ends with the counts by group, then the totals.
    tail = result.output[result.output.index("what each pass is worth"):]
    # the course's title fails for the fixture's widths that wait on the arithmetic: findings, and the terminal says so
    findings = report.counts_by_group()[COURSE][checker.FAIL]
    assert findings and (f"{findings} fails against the course: a finding: the course's statement or figure does not hold "
                         "on this machine and model; the run is not broken.") in " ".join(tail.split())
    assert "│ sanity checks: │" in tail and "│ this run       │" in tail
    assert tail.rstrip().splitlines()[-2] == report.summary()


def test_a_group_must_exist():
    with pytest.raises(ValueError, match="no claim group 'evidence'"):
        grouped("evidence")
    # Every registered claim puts its results in a group (the default is ITSELF only where a claim sets none).
    assert all(callable(c) for c in GENERAL_CLAIMS)


def test_prefill_ratio_beside_the_course_by_hand():
    """The course's 72× at 7.16 GB ÷ 6.74 G = 1.0623 bytes per parameter takes a ridge near 2 × 72 ÷ 1.0623 = 136
    FLOPs/byte. A machine with a ridge of 10 FLOPs/byte at 0.5 bytes per parameter: about 10 × 0.5 ÷ 2 = 2.5×."""
    text = prefill_ratio_reason(2.11, 10.0, 0.5)
    assert text.startswith("prefill is 2.11× decode; the course's 72× was measured on the DGX Spark's GPU")
    assert "at 1.06 bytes per parameter takes a ridge near 136 FLOPs/byte" in text
    assert "this machine's ridge is 10 FLOPs/byte (lesson 7), so at 0.5 bytes per parameter about 2.5×" in text
    assert text.endswith("it does less arithmetic per byte read than that GPU")
    assert prefill_ratio_reason(80.0, 200.0, 1.0).endswith("about 100×: it does no less arithmetic per byte read than that GPU")
    assert prefill_ratio_reason(3.0, None, 0.5).endswith("no ridge point (lesson 7) or no model size (lesson 4) to size this machine's")


def test_prefill_claim_reports_the_ratio_beside_72(tmp_path):
    """Prefill 300 tokens/s against decode 100: 3× in the observed column beside the course's 72×, a pass; with lesson
    7's ridge of 20 FLOPs/byte and lesson 4's 60 MB over 100 M parameters: about 20 × 0.6 ÷ 2 = 6×."""
    l4 = lesson("04_next_token", [m("prefill_tokens_per_s_long_prompt", "tokens/s", [300.0]),
                                  m("decode_tokens_per_s_short_prompt", "tokens/s", [100.0])],
                host_values={"model_info": {"n_params": 100e6, "tensor_bytes": 60e6}})
    l7 = lesson("07_hardware_fit", [m("ridge_point_flops_per_byte", "FLOPs/byte", [20.0])])
    claim = only(checker.check_run(run_of(tmp_path, l4, l7), []), "prefill_faster_than_decode")
    assert claim.status == checker.PASS and claim.group == ITSELF
    assert claim.observed.endswith(": 3× decode (the course: 72×)")
    assert "so at 0.6 bytes per parameter about 6×" in claim.detail


def test_the_summary_says_which_fails_are_findings_against_the_course(full):
    """Five fails against the course read "5 fail" on the run's last line; a reader took them for a broken run."""
    run, _ = full

    def summary(*statuses: tuple[str, str]) -> str:
        results = [ClaimResult(f"c{k}", "general", "08", "a claim", status, group=group)
                   for k, (status, group) in enumerate(statuses)]
        return checker.CheckReport(load_run(run), [], results, "2026-12-06T00:00:00+00:00").summary()

    passed, course_fail, own_fail = (checker.PASS, ITSELF), (checker.FAIL, COURSE), (checker.FAIL, ITSELF)
    assert summary(passed, passed, (checker.NA, COURSE)) == "2 pass, 0 fail, 1 not applicable"
    assert summary(passed, own_fail) == "1 pass, 1 fail, 0 not applicable"
    assert summary(passed, course_fail, course_fail) == ("1 pass, 2 fail (each a finding against the course, none that "
                                                         "breaks the run), 0 not applicable")
    assert summary(course_fail, own_fail, (checker.INCONCLUSIVE, SANITY)) == (
        "0 pass, 2 fail (1 of them a finding against the course), 1 inconclusive, 0 not applicable")
