"""The run's split of each request's time outside the server's timings (`bytesup.run.harness`): the server's part
(a bare client's) and the harness's (the run's client's minus the bare one's, pair by pair), by hand, in the report
against the harness's budget, and measured on a real server by the probe and by a run."""

from __future__ import annotations

import json
import math
import time

import pytest

from bytesup.check import overhead
from bytesup.llama import process
from bytesup.llama.client import BareClient, LlamaServer
from bytesup.llama.recording import RecordingTransport
from bytesup.models.catalog import SYNTHETIC_DEFAULT, ensure_model
from bytesup.run import harness
from bytesup.options import RunOptions
from bytesup.run.report import report_md
from bytesup.run.runner import run_lessons
from bytesup.store.manifest import HarnessLevel, HarnessSplit, Manifest
from bytesup.store.runs import load_run, read_manifest

from test_overhead import planted_run


def test_each_pair_gives_the_servers_part_and_the_harnesss():
    server, own = harness.split_pairs([3.0, 2.5, 1.25], [1.0, 1.5, 1.0])
    assert server == [1.0, 1.5, 1.0]
    assert own == pytest.approx([2.0, 1.0, 0.25])
    with pytest.raises(ValueError):
        harness.split_pairs([1.0, 2.0], [1.0])


def exchange(path: str, request: dict | None) -> str:
    return json.dumps({"server": "main", "method": "POST", "path": path, "request": request, "status": 200,
                       "response": {}, "elapsed_ms": 1.0}) + "\n"


def test_the_largest_n_probs_the_lessons_asked_for_joins_the_levels(tmp_path):
    http = tmp_path / "http"
    http.mkdir()
    assert harness.largest_n_probs(http) == 0 and harness.largest_n_probs(tmp_path / "none") == 0
    (http / "04.jsonl").write_text(exchange("/completion", {"prompt": "a", "n_probs": 3}) + "not json\n"
                                   + exchange("/completion", {"prompt": "b", "n_probs": 20}), encoding="utf-8")
    (http / "05.jsonl").write_text(exchange("/tokenize", {"content": "a", "n_probs": 99})
                                   + exchange("/completion", {"prompt": "c", "n_probs": True})
                                   + exchange("/completion", {"prompt": "d"}), encoding="utf-8")
    assert harness.largest_n_probs(http) == 20
    assert harness.levels_for(20) == (0, 8, 20)
    assert harness.levels_for(8) == harness.levels_for(0) == (0, 8)


def with_split(run_dir, split: HarnessSplit) -> None:
    manifest = Manifest.parse(json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")), "test")
    manifest.harness_split = split
    (run_dir / "manifest.json").write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")


def split_rows(page: str) -> dict[int, list[str]]:
    section = page.split("## The harness's own time per request", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "n_probs" not in line]
    return {int(r[0].strip("| ")): [c.strip(" |") for c in r[1:]] for r in rows if r[0].strip("| ").isdigit()}


# Settled where the median lies further from the budget than twice its standard error, 1.2533 × σ ÷ √3, σ the range ÷
# d₂(3) = 1.693: a range of 0.1 ms gives 0.0427 ms, twice that 0.085 (0.25 and 0.85 against 0.5: yes, no); a range of
# 0.4 ms gives 0.171 ms, twice that 0.342, more than the 0.1 between 0.4 and 0.5 and the 0.2 between 1.2 and 1.0.
@pytest.mark.parametrize("harness_ms, within", [([0.2, 0.25, 0.3], "yes"), ([0.8, 0.85, 0.9], "no"),
                                                ([0.2, 0.4, 0.6], "cannot tell yet")])
def test_the_report_holds_the_harnesss_part_to_its_budget(tmp_path, harness_ms, within):
    run_dir, _, _ = planted_run(tmp_path)
    with_split(run_dir, HarnessSplit(n_predict=32, pairs=3, levels=[
        HarnessLevel(n_probs=0, server_ms=[1.0, 1.5, 2.0], harness_ms=harness_ms, budget_ms=0.5),
        HarnessLevel(n_probs=8, server_ms=[3.0, 4.0, 5.0], harness_ms=[1.0, 1.2, 1.4], budget_ms=1.0),
        HarnessLevel(n_probs=20, server_ms=[6.0, 7.0, 9.0], harness_ms=[2.0, 2.0, 2.0])]))
    rows = split_rows(report_md(load_run(run_dir), None))
    # medians by hand; p10 and p90 of three values lie at ranks 0.2 and 1.8
    low = harness_ms[0] + 0.2 * (harness_ms[1] - harness_ms[0])
    high = harness_ms[1] + 0.8 * (harness_ms[2] - harness_ms[1])
    assert rows[0] == ["1.5", f"{harness_ms[1]:g}", f"{low:.3g} to {high:.3g}", "0.5", within]
    assert rows[8] == ["4", "1.2", "1.04 to 1.36", "1", "cannot tell yet"]
    assert rows[20] == ["7", "2", "2 to 2", "", ""]


def test_a_level_takes_pairs_until_its_verdict_is_settled():
    # Over its 1 ms budget by far: 2.0, 2.1 and 1.9 ms, the median's standard error 1.2533 × (0.2 ÷ 1.693) ÷ √3 =
    # 0.085 ms, twice that well under the 1 ms between median and budget: settled at the third pair, not before.
    assert harness.stop_after([2.0, 2.1], 1.0, pairs=6) is None
    assert harness.stop_after([2.0, 2.1, 1.9], 1.0, pairs=6) == "tight"
    # At the budget's edge (0.625, 0.343, 0.473 ms against 0.5): on to the maximum, or the level's time budget.
    edge = [0.625, 0.343, 0.473]
    assert harness.stop_after(edge, 0.5, pairs=6) is None
    assert harness.stop_after(edge * 2, 0.5, pairs=6) == "maximum"
    assert harness.stop_after(edge, 0.5, pairs=6, spent_s=harness.LEVEL_BUDGET_S) == "budget"
    # A make run's pairs at n_probs 8 (2026-12-06): the server's part moved by 2 ms between the two requests of two
    # pairs, and the harness's read 0.896, −1.037 and −0.961 ms. A median below zero is the server's, not the
    # harness's: no verdict, and more pairs; a median of 0 settles nothing either.
    moved = [0.896, -1.037, -0.961]
    assert not overhead.settled(moved, 1.0) and overhead.within_budget(moved, 1.0) == "cannot tell yet"
    assert harness.stop_after(moved, 1.0, pairs=6) is None and harness.stop_after(moved * 2, 1.0, pairs=6) == "maximum"
    assert not overhead.settled([0.0, 0.0, 0.0], 0.5) and overhead.settled([0.1, 0.1, 0.1], 0.5)
    # No budget, nothing to judge: the fewest pairs; and never more pairs than asked for.
    assert harness.stop_after([1.0, 50.0, 3.0], None, pairs=6) == "tight"
    assert harness.stop_after([2.0, 2.1], 1.0, pairs=2) == "tight" and harness.stop_after(edge[:2], 0.5, pairs=2) == "maximum"


def test_a_pair_whose_requests_waited_apart_is_set_aside_and_another_taken(monkeypatch):
    """Hand-made pairs at n_probs 8 (budget 1 ms): the run's client's part outside the timings and its thread's CPU,
    the bare client's part and CPU. Pair 2's bare request waited 2 ms more (its part 4.0 where the others read 2.0,
    its CPU the same): wall part 0.9 − 2.0 = −1.1 ms against a CPU part of 0.9 ms, 2.0 apart, past MOVED_MS (0.5):
    set aside. Pair 4 is 0.85 on the wall clock and 1.70 − 0.4 = 1.30 on the CPU's, 0.45 apart: it stands. Kept: 0.9,
    0.95 and 0.85 ms, whose median 0.9 lies 0.1 under the budget, more than twice its standard error (1.2533 × (0.1 ÷
    1.693) ÷ √3 = 0.0427 ms): settled at the third kept pair."""
    own = iter([(2.9, 1.3), (2.9, 1.3), (2.95, 1.35), (2.85, 1.70)])  # (part ms, CPU ms), one a pair in order
    bare = iter([(2.0, 0.4), (4.0, 0.4), (2.0, 0.4), (2.0, 0.4)])

    def outside_ms(client, body, cpu_ms=None):
        part, cpu = next(own)
        cpu_ms.append(cpu)
        return part

    class Bare:
        cpu_ms = 0.0

        def completion_ms(self, raw):
            part, self.cpu_ms = next(bare)
            return 100.0 + part, 100.0

    monkeypatch.setattr(harness, "outside_ms", outside_ms)
    monkeypatch.setattr(harness.quiet, "settle", lambda: None)
    level = harness.measure_level(None, Bare(), 8, warm_up=False)
    assert level.set_aside_ms == [pytest.approx(-1.1)]
    assert level.harness_ms == pytest.approx([0.9, 0.95, 0.85])
    assert level.harness_cpu_ms == pytest.approx([0.9, 0.95, 1.3])
    assert level.server_ms == pytest.approx([2.0, 2.0, 2.0]) and level.stopped_by == "tight"
    assert harness.waited_alike(-1.1, 0.9) is False and harness.waited_alike(0.4, 0.85) is True
    assert harness.waited_alike(1.0, 1.5) is True and harness.waited_alike(1.0, 1.51) is False


def test_a_level_stops_once_as_many_pairs_are_set_aside_as_it_may_keep():
    assert harness.stop_after([], 1.0, pairs=6, set_aside=5) is None
    assert harness.stop_after([], 1.0, pairs=6, set_aside=6) == "maximum"
    assert harness.stop_after([0.9, 0.9], 1.0, pairs=6, set_aside=6) == "maximum"


def test_the_report_and_the_log_say_what_stopped_each_levels_pairs(tmp_path):
    run_dir, _, _ = planted_run(tmp_path)
    split = HarnessSplit(n_predict=32, pairs=6, levels=[
        HarnessLevel(n_probs=0, server_ms=[1.0] * 6, harness_ms=[0.625, 0.343, 0.473] * 2, budget_ms=0.5,
                     stopped_by="maximum"),
        HarnessLevel(n_probs=8, server_ms=[3.0, 4.0, 5.0], harness_ms=[2.0, 2.1, 1.9], budget_ms=1.0, stopped_by="tight")])
    with_split(run_dir, split)
    page = report_md(load_run(run_dir), None)
    rows = split_rows(page)
    assert rows[0][-1] == "6 (maximum)" and rows[8][-1] == "3 (tight)"
    assert "sent up to 6 times (each level's pairs stop once its verdict against the budget is settled" in page
    assert harness.sentence(split).startswith("harness's own time per request (up to 6 pairs against a bare client, "
                                              "32 tokens): n_probs 0 (6 pairs, maximum): the harness 0.47 ms")
    # the pairs that ran out put 0.473 within twice its standard error of 0.5: no verdict, in the page and the log
    assert rows[0][-2] == "cannot tell yet" and rows[8][-2] == "no"
    said = harness.sentence(split)
    assert "budget 0.5 ms: cannot tell yet" in said and "budget 1 ms: over" in said


def test_the_report_and_the_log_say_which_pairs_were_set_aside(tmp_path):
    run_dir, _, _ = planted_run(tmp_path)
    split = HarnessSplit(n_predict=32, pairs=6, levels=[
        HarnessLevel(n_probs=0, server_ms=[], harness_ms=[], budget_ms=0.5, stopped_by="maximum",
                     set_aside_ms=[2.5] * 6),
        HarnessLevel(n_probs=8, server_ms=[2.0] * 3, harness_ms=[0.9, 0.95, 0.85], budget_ms=1.0, stopped_by="tight",
                     harness_cpu_ms=[0.9, 0.95, 1.3], set_aside_ms=[-1.1])])
    with_split(run_dir, split)
    page = report_md(load_run(run_dir), None)
    rows = split_rows(page)
    assert rows[0] == ["", "", "", "0.5", "cannot tell yet", "0, 6 set aside (maximum)"]
    assert rows[8][-2:] == ["yes", "3, 1 set aside (tight)"]
    assert "Set aside: 6 at n_probs 0 (harness parts 2.5, 2.5, 2.5, 2.5, 2.5, 2.5 ms); 1 at n_probs 8 (harness parts " in page
    said = harness.sentence(split)
    assert "n_probs 0 (0 pairs, 6 set aside, maximum): every pair set aside" in said
    assert "n_probs 8 (3 pairs, 1 set aside, tight): the harness 0.90 ms, budget 1 ms: within" in said


def test_a_split_that_failed_says_why_in_the_report(tmp_path):
    run_dir, _, _ = planted_run(tmp_path)
    with_split(run_dir, HarnessSplit(skipped="the split was not measured: ConnectError: refused"))
    page = report_md(load_run(run_dir), None)
    assert "the split was not measured: ConnectError: refused" in page and "within budget" not in page


# --- on a real server -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served():
    """The embedded engine on the fast synthetic model: plumbing, not speed."""
    model = ensure_model(SYNTHETIC_DEFAULT)
    port = process.free_port()
    started = process.start_server(model, ["--port", str(port)])
    try:
        yield started.url
    finally:
        process.stop_server(port)


@pytest.mark.integration
def test_the_probe_pairs_both_clients_at_every_level(served, tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "MOVED_MS", math.inf)  # plumbing, not speed: no pair is set aside on a loaded machine
    http = tmp_path / "http"
    http.mkdir()
    (http / "04.jsonl").write_text(exchange("/completion", {"prompt": "a", "n_probs": 12}), encoding="utf-8")
    split = harness.probe(LlamaServer(served, transport=RecordingTransport([], "probe")), BareClient(served), http,
                          pairs=2, n_predict=4)
    assert split.skipped is None, split.skipped
    assert [level.n_probs for level in split.levels] == [0, 8, 12]
    assert [level.budget_ms for level in split.levels] == [0.5, 1.0, None]
    for level in split.levels:
        assert len(level.server_ms) == len(level.harness_ms) == len(level.harness_cpu_ms) == 2 and not level.set_aside_ms
        assert all(x > 0 for x in level.server_ms)  # the server always does some work outside its timings
    assert split.seconds is not None and (split.n_predict, split.pairs) == (4, 2)


@pytest.mark.integration
def test_each_client_counts_its_own_cpu_apart_from_its_wait(served):
    """The CPU a client's thread spends over a request is below the request's wall time: the thread sleeps while the
    server decodes. A wall clock read in its place would give at least the wall time."""
    body = harness.request_body(0, n_predict=16)
    bare = BareClient(served)
    try:
        wall, _ = bare.completion_ms(json.dumps({"prompt": harness.PROMPT, **body}).encode())
    finally:
        bare.close()
    assert 0.0 <= bare.cpu_ms < wall
    cpu: list[float] = []
    with LlamaServer(served) as client:
        client.settle = None
        started = time.perf_counter()
        harness.outside_ms(client, body, cpu)
        took = (time.perf_counter() - started) * 1000.0
        harness.outside_ms(client, body)  # no list: nothing to append to
    assert len(cpu) == 1 and 0.0 <= cpu[0] < took


@pytest.mark.integration
def test_a_probe_of_a_server_that_is_gone_says_so_and_raises_nothing(tmp_path):
    url = f"http://127.0.0.1:{process.free_port()}"
    split = harness.probe(LlamaServer(url, timeout=5), BareClient(url, timeout=5), tmp_path)
    assert split.skipped and split.skipped.startswith("the split was not measured:") and split.levels == []
    assert "harness's own time: the split was not measured" in harness.sentence(split)


@pytest.mark.integration
def test_a_live_run_splits_the_time_after_its_lessons(served, tmp_path, monkeypatch, capsys, small_bandwidth_reading):
    monkeypatch.setenv(harness.PROBE_ENV, "1")
    monkeypatch.setattr(harness, "MOVED_MS", math.inf)
    monkeypatch.setattr(harness, "PAIRS", 2)
    monkeypatch.setattr(harness, "N_PREDICT", 4)
    out = tmp_path / "run"
    assert run_lessons(["01_model_on_disk", "02_tokens_and_embeddings"], RunOptions(server_url=served, out=out)) == 0
    split = read_manifest(out).harness_split
    assert split is not None and split.skipped is None, split
    assert [level.n_probs for level in split.levels] == [0, 8] and (split.pairs, split.n_predict) == (2, 4)
    assert all(len(level.harness_ms) == 2 for level in split.levels)
    said = capsys.readouterr()
    assert "harness's own time per request (up to 2 pairs against a bare client, 4 tokens)" in said.out + said.err


@pytest.mark.integration
def test_one_lesson_a_replay_and_a_run_told_not_to_measure_nothing(served, tmp_path, monkeypatch, small_bandwidth_reading):
    both = ["01_model_on_disk", "02_tokens_and_embeddings"]
    monkeypatch.setenv(harness.PROBE_ENV, "0")
    out = tmp_path / "run"
    assert run_lessons(both, RunOptions(server_url=served, out=out)) == 0
    assert read_manifest(out).harness_split is None
    monkeypatch.setenv(harness.PROBE_ENV, "1")
    again = tmp_path / "again"
    assert run_lessons(both, RunOptions(replay=out, out=again)) == 0
    assert read_manifest(again).harness_split is None
    alone = tmp_path / "alone"  # a lesson on its own, as `python lessons/01_model_on_disk.py` runs it
    assert run_lessons(["01_model_on_disk"], RunOptions(server_url=served, out=alone)) == 0
    assert read_manifest(alone).harness_split is None
