"""A busy machine is named: the rule (bytesup.course.busy) on hand-made readings that flip it one signal at a time,
the readings (bytesup.host.load) on a hand-made /proc, the warning a lesson's page and the report open with, the
timing claims made inconclusive, and the timeout that says what the run read of the machine.

Every reading here is made by hand: nothing depends on what else this machine runs, and no speed is asserted."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bytesup.check import checker
from bytesup.check.claims import common
from bytesup.check.verdicts import FAIL, INCONCLUSIVE, PASS, ClaimResult
from bytesup.course import busy
from bytesup.errors import ServerTimeout
from bytesup.host import load
from bytesup.run import report
from bytesup.run.runner import timeout_on_machine
from bytesup.store.render import lesson_md
from bytesup.store.results import LessonResult, Measurement
from bytesup.store.runs import Run, load_run

L4 = "04_next_token"


def quiet(**change: Any) -> dict[str, Any]:
    """The readings of a quiet lesson on 2 cores with a 2-thread server, with `change` applied."""
    readings: dict[str, Any] = {
        "cores": 2, "server_threads": 2,
        "load_average": [{"at": "before", "load1": 1.2}, {"at": "after", "load1": 2.1}],
        "cpu": {"seconds": 40.0, "foreign_share": 0.04},
        "stretches": [], "collapsed": [],
    }
    readings.update(change)
    return readings


# --- the rule ------------------------------------------------------------------------------------

def test_a_quiet_lesson_is_not_busy_and_a_lesson_without_readings_has_no_verdict():
    verdict = busy.judge(quiet())
    assert verdict is not None and not verdict.busy and verdict.reasons == ()
    assert verdict.load == "load average 2.1 on 2 cores"   # the highest reading
    assert busy.judge(None) is None and busy.judge({}) is not None   # no readings at all: nothing to judge


def test_the_share_of_the_cores_other_processes_used_flips_it():
    assert not busy.judge(quiet(cpu={"seconds": 40.0, "foreign_share": 0.25})).busy   # at the limit: not above it
    verdict = busy.judge(quiet(cpu={"seconds": 40.0, "foreign_share": 0.48}))
    assert verdict.busy
    assert verdict.reasons == ("other processes used 48% of the cores' time during the lesson (more than 25%)",)


def test_a_busy_stretch_between_turns_flips_it_when_it_is_long_enough():
    short = quiet(stretches=[{"at": "turn 2", "seconds": 4.9, "foreign_share": 0.9},
                             {"at": "turn 3", "seconds": 30.0, "foreign_share": 0.02}])
    assert not busy.judge(short).busy   # 4.9 s < MIN_STRETCH_S = 5 s: too short to judge
    spell = quiet(stretches=[{"at": "turn 2", "seconds": 6.0, "foreign_share": 0.6},
                             {"at": "turn 3", "seconds": 30.0, "foreign_share": 0.02}])
    verdict = busy.judge(spell)
    assert verdict.busy and "60% of the cores' time over 6 s up to turn 2" in verdict.reasons[0]


@pytest.mark.parametrize("cores, threads, below, above", [
    (2, 2, 3.49, 3.51),   # limit: 2 threads + 1 for the run + 0 free cores + 0.5 = 3.5
    (4, 2, 5.49, 5.51),   # 2 + 1 + 2 free cores + 0.5 = 5.5
    (2, 4, 5.49, 5.51),   # more threads than cores: 4 + 1 + 0 + 0.5 = 5.5
])
def test_the_load_average_against_the_servers_threads_and_the_cores_flips_it(cores, threads, below, above):
    assert busy.load_limit(cores, threads) == pytest.approx(below + 0.01)

    def with_load(value: float) -> busy.Verdict | None:
        return busy.judge(quiet(cores=cores, server_threads=threads, cpu=None,
                                load_average=[{"at": "before", "load1": 1.0}, {"at": "after", "load1": value}]))

    assert not with_load(below).busy
    verdict = with_load(above)
    assert verdict.busy and verdict.reasons[0].startswith(f"load average {above:.2g} on {cores} cores (after)")


def test_without_a_load_average_the_rule_says_the_figure_is_not_available():
    verdict = busy.judge(quiet(load_average=[], cpu=None))
    assert not verdict.busy
    assert verdict.sentence() == ("the machine was not busy by the run's readings "
                                  "(the load average is not available on this platform)")


def test_the_bandwidths_drift_flips_it_only_beyond_both_readings_ranges():
    assert not busy.judge(quiet(drift={"change": -0.20, "ranges_overlap": False})).busy   # 20% ≤ 25%
    assert not busy.judge(quiet(drift={"change": -0.40, "ranges_overlap": True})).busy    # the ranges overlap
    verdict = busy.judge(quiet(drift={"change": -0.40, "ranges_overlap": False}))
    assert verdict.busy and verdict.reasons[0].startswith("the memory bandwidth read 40% lower after")


def test_the_pace_is_kept_with_the_readings_but_is_not_part_of_the_rule():
    # A pace from 181 to 102 tokens/s across a lesson, as a quiet 2-core virtual machine read it over one second: the
    # machine wanders so; that is the cross-lesson claims' floor (bytesup.check.claims.consistency), not a busy lesson.
    assert not busy.judge(quiet(pace={"before": [141.6, 185.4, 181.5], "after": [79.8, 101.6, 105.1]})).busy
    # Its samples: positive numbers only, [] for a reading not there.
    assert busy.pace_samples({"before": [90.0, 0.0, "x", 100.0, None]}, "before") == [90.0, 100.0]
    assert busy.pace_samples({"before": [90.0]}, "after") == [] and busy.pace_samples(None, "before") == []


def test_a_speeds_samples_collapsing_against_its_first_ones():
    # The first third (2 of 6 samples) has the median 27, the last third 0.285: below 0.5 × 27 = 13.5.
    assert busy.collapse([27, 27, 26, 27, 0.3, 0.27], higher_is_better=True) == (27, pytest.approx(0.285))
    # 14 against 27: above 13.5, a slower spell but no collapse; and scatter around one level is none either.
    assert busy.collapse([27, 27, 26, 20, 14, 14], higher_is_better=True) is None
    assert busy.collapse([27, 31, 24, 29, 26, 30], higher_is_better=True) is None
    # A time collapses upwards: 38 ms to 3,800 ms is above 2 × 38.
    assert busy.collapse([38, 38, 39, 38, 3800, 3900], higher_is_better=False) == (38, 3850)
    assert busy.collapse([38, 38, 0.3], higher_is_better=True) is None   # fewer than 4 samples cannot tell


def test_collapses_reads_only_timings_and_the_verdict_names_the_measurement():
    speed = {"name": "decode_tokens_per_s", "unit": "tokens/s", "samples": [27, 27, 26, 27, 0.3, 0.27],
             "higher_is_better": True, "settings": {"preset": "f32"}}
    share = {**speed, "name": "decode_efficiency", "unit": "%"}            # not a timing
    fact = {**speed, "name": "tokens", "higher_is_better": None}           # a fact, not a score
    found = busy.collapses([speed, share, fact])
    assert [c["measurement"] for c in found] == ["decode_tokens_per_s"]
    verdict = busy.judge(quiet(collapsed=found))
    assert verdict.busy
    assert verdict.reasons == (("decode_tokens_per_s (preset f32) went from 27 to 0.285 tokens/s between the medians "
                               "of its first and last samples"),)


# --- the readings on a hand-made /proc ------------------------------------------------------------

def proc_stat(pid: int, ppid: int, ticks: tuple[int, int, int, int], name: str = "llama server") -> str:
    """/proc/<pid>/stat: the name in parentheses (spaces allowed), then fields 3 (state) to 17 (cstime)."""
    utime, stime, cutime, cstime = ticks
    return f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0\n"


def make_proc(root: Path, cpu: tuple[int, int], processes: dict[int, tuple[int, tuple[int, int, int, int]]]) -> None:
    """A /proc with /proc/stat's first line giving `cpu` = (all, idle) ticks and the given processes."""
    root.mkdir(parents=True, exist_ok=True)
    total, idle = cpu
    # user nice system idle iowait irq softirq steal: busy = total - idle, no iowait.
    (root / "stat").write_text(f"cpu  {total - idle} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\n")
    for pid, (ppid, ticks) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(proc_stat(pid, ppid, ticks))


def test_the_watch_counts_the_run_its_servers_and_their_children_as_its_own(tmp_path, monkeypatch):
    me, child, grandchild, outside, stranger = os.getpid(), 900001, 900002, 900003, 900004
    proc = tmp_path / "proc"
    clock = iter([0.0, 50.0])
    loads = iter([1.0, 2.5])
    monkeypatch.setattr(load, "load1", lambda: next(loads))

    def at(all_ticks: int, idle: int, mine: int, child_t: int, grand: int, out: int, strange: int) -> None:
        make_proc(proc, (all_ticks, idle), {me: (1, (mine, 0, 0, 0)), child: (me, (child_t, 0, 0, 0)),
                                            grandchild: (child, (grand, 0, 0, 0)), outside: (1, (out, 0, 0, 0)),
                                            stranger: (1, (strange, 0, 0, 0))})

    watch = load.Watch(2, 2, servers=lambda: [outside], proc=proc, clock=lambda: next(clock))
    at(10_000, 6_000, 100, 200, 50, 300, 400)
    watch.start()
    # Over the lesson: 10,000 ticks in all, 1,000 idle, so 9,000 busy; the run's tree used 100 + 2,000 + 500 and
    # the outside server 3,000: 5,600 its own, 3,400 others' (the stranger's 3,400): 34% of the cores' time.
    at(20_000, 7_000, 200, 2_200, 550, 3_300, 3_800)
    record = watch.record()
    assert record["cpu"] == {"seconds": 50.0, "foreign_share": 0.34}
    assert record["load_average"] == [{"at": "before", "load1": 1.0}, {"at": "after", "load1": 2.5}]
    assert record["stretches"] == []   # no turn between: the lesson is the one stretch
    verdict = busy.judge(record)
    assert verdict.busy and verdict.reasons == (("other processes used 34% of the cores' time during the lesson "
                                                "(more than 25%)"),)


def test_turns_are_read_at_most_every_few_seconds_and_each_stretch_is_judged(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    now = [0.0]
    monkeypatch.setattr(load, "load1", lambda: None)
    me = os.getpid()
    make_proc(proc, (1_000, 1_000), {me: (1, (0, 0, 0, 0))})
    watch = load.Watch(2, 2, proc=proc, clock=lambda: now[0])
    watch.start()
    now[0] = 2.0
    watch.turn()                      # 2 s after the start: skipped (MIN_TURN_S = 5 s)
    assert len(watch.readings) == 1
    # 10 s in: 2,000 ticks more, 1,000 of them others' (50%); then 30 s more with none of others'.
    now[0] = 10.0
    make_proc(proc, (3_000, 2_000), {me: (1, (0, 0, 0, 0))})
    watch.turn()
    now[0] = 40.0
    make_proc(proc, (9_000, 8_000), {me: (1, (0, 0, 0, 0))})
    record = watch.record()
    assert record["stretches"] == [{"at": "turn 1", "seconds": 10.0, "foreign_share": 0.5},
                                   {"at": "after", "seconds": 30.0, "foreign_share": 0.0}]
    # Over the whole lesson 1,000 of 8,000 ticks (12.5%): quiet; the 10 s stretch at 50% names the machine busy.
    assert record["cpu"]["foreign_share"] == 0.125
    assert record["load_average"] == []
    verdict = busy.judge(record)
    assert verdict.busy and "50% of the cores' time over 10 s up to turn 1" in verdict.reasons[0]


def test_without_proc_the_cpu_figures_are_not_available(tmp_path):
    watch = load.Watch(2, 2, proc=tmp_path / "nothing")
    watch.start()
    record = watch.record()
    assert record["cpu"] is None and record["stretches"] == []
    assert load.cpu_ticks(tmp_path / "nothing") is None and load.tree_ticks([1], tmp_path / "nothing") is None


# --- the page, the report and the claims ---------------------------------------------------------

BUSY = quiet(cpu={"seconds": 40.0, "foreign_share": 0.48},
             load_average=[{"at": "before", "load1": 1.0}, {"at": "after", "load1": 6.1}])


def lesson4(machine: dict[str, Any] | None, prefill: float = 50.0, decode: float = 80.0) -> LessonResult:
    """A lesson 4 whose prefill (50 tokens/s) is slower than its decode (80): the timing claim fails on its own."""
    return LessonResult(
        lesson_id=L4, title="The forward pass", started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:00:01+00:00",
        measurements=[Measurement.of("prefill_tokens_per_s_long_prompt", "tokens/s", [prefill] * 5, higher_is_better=True),
                      Measurement.of("decode_tokens_per_s_short_prompt", "tokens/s", [decode] * 5, higher_is_better=True)],
        host_values={} if machine is None else {busy.HOST_VALUE: machine})


def run_of(folder: Path, *results: LessonResult) -> Run:
    folder.mkdir(parents=True, exist_ok=True)
    for result in results:
        (folder / f"{result.lesson_id}.json").write_text(json.dumps(result.to_json(), indent=2), encoding="utf-8")
    return load_run(folder)


def claim(run: Run, claim_id: str) -> ClaimResult:
    found = [r for r in checker.check_run(run, []).results if r.id == claim_id]
    assert len(found) == 1, found
    return found[0]


def test_a_busy_lesson_turns_a_failing_timing_claim_inconclusive_and_a_quiet_one_leaves_it_failing(tmp_path):
    assert claim(run_of(tmp_path / "none", lesson4(None)), "prefill_faster_than_decode").status == FAIL
    assert claim(run_of(tmp_path / "quiet", lesson4(quiet())), "prefill_faster_than_decode").status == FAIL
    judged = claim(run_of(tmp_path / "busy", lesson4(BUSY)), "prefill_faster_than_decode")
    assert judged.status == INCONCLUSIVE
    assert judged.detail.startswith("inconclusive: the machine was busy during 04_next_token: load average 6.1 on 2 "
                                    "cores (after), above 3.5")
    assert "on these timings alone it would fail" in judged.detail
    # A pass on a busy machine is no evidence either.
    passed = claim(run_of(tmp_path / "busy-pass", lesson4(BUSY, prefill=500.0)), "prefill_faster_than_decode")
    assert passed.status == INCONCLUSIVE and "it would pass" in passed.detail


def test_the_shared_helper_judges_any_claim_on_the_lessons_it_reads(tmp_path):
    run = run_of(tmp_path / "r", lesson4(BUSY))
    other = ClaimResult("some_consistency", "general", "05_generating_text", "a figure agrees across lessons", PASS)
    assert common.unless_busy(run, other) == other                       # lesson 5 is not in the run: nothing known
    assert common.unless_busy(run, other, "05_generating_text", "04_").status == INCONCLUSIVE   # it reads lesson 4 too
    assert common.busy_during(run, "04_") is not None and common.busy_during(run, "06_") is None
    not_timing = ClaimResult("x", "general", L4, "x", FAIL)
    assert common.unless_busy(run_of(tmp_path / "q", lesson4(quiet())), not_timing) == not_timing


def test_a_lessons_page_opens_with_the_warning_and_a_quiet_or_older_one_does_not(tmp_path):
    page = lesson_md(lesson4(BUSY))
    lines = page.splitlines()
    assert lines[0] == "# The forward pass"
    assert lines[2].startswith("Warning: the machine was busy: load average 6.1 on 2 cores (after), above 3.5: the "
                               "server's 2 threads, one for the run, the 0 cores the server leaves free and 0.5; "
                               "other processes used 48% of the cores' time during the lesson (more than 25%). ")
    assert "`bytesup check` calls the timing claims that read them inconclusive" in lines[2]
    # A quiet lesson's page, and one recorded before the readings, are the page without them, byte for byte.
    assert lesson_md(lesson4(quiet())) == lesson_md(lesson4(None))
    assert "Warning" not in lesson_md(lesson4(None))


def test_the_reports_summary_names_the_busy_lesson(tmp_path):
    busy_run = run_of(tmp_path / "busy", lesson4(BUSY))
    found = [w for w in report.warnings(busy_run, None) if "busy" in w]
    assert found == [("The machine was busy during 04_next_token: load average 6.1 on 2 cores (after), above 3.5: the "
                     "server's 2 threads, one for the run, the 0 cores the server leaves free and 0.5; other processes "
                     "used 48% of the cores' time during the lesson (more than 25%). Its timing claims are inconclusive.")]
    assert "The machine was busy during 04_next_token" in report.report_md(busy_run, None)
    assert not [w for w in report.warnings(run_of(tmp_path / "quiet", lesson4(quiet())), None) if "busy" in w]


# --- a request that times out ----------------------------------------------------------------------

def test_a_timeout_says_the_machine_was_busy_with_the_load_reading(tmp_path, monkeypatch):
    loads = iter([1.0, 6.1])
    monkeypatch.setattr(load, "load1", lambda: next(loads))
    watch = load.Watch(2, 2, proc=tmp_path / "no-proc")
    watch.start()
    error = timeout_on_machine(ServerTimeout("http://127.0.0.1:8080", "/completion", 120), watch)
    assert isinstance(error, ServerTimeout)
    assert str(error).startswith("The server at http://127.0.0.1:8080 did not answer /completion within 120 s; the "
                                 "machine was busy: load average 6.1 on 2 cores (now), above 3.5")
    assert "Other programs were taking the cores the server computes on" in str(error)


def test_a_timeout_on_a_quiet_machine_says_so_and_other_errors_are_left_alone(tmp_path, monkeypatch):
    loads = iter([1.0, 1.5])
    monkeypatch.setattr(load, "load1", lambda: next(loads))
    watch = load.Watch(2, 2, proc=tmp_path / "no-proc")
    watch.start()
    timeout = ServerTimeout("http://127.0.0.1:8080", "/completion", 120)
    said = str(timeout_on_machine(timeout, watch))
    assert said.startswith("The server at http://127.0.0.1:8080 did not answer /completion within 120 s; the machine "
                           "was not busy by the run's readings (load average 1.5 on 2 cores). It may be busy with a "
                           "long prompt or stuck;")
    assert timeout_on_machine(timeout, None) is timeout                 # a replay reads no machine
    other = ServerTimeout.__mro__[1]("something else")
    assert timeout_on_machine(other, watch) is other


# --- through the runner: recorded with the lesson, replayed as recorded, and a timeout -------------

URL = "http://127.0.0.1:8099"
LESSON = '''"""A decode lesson for the busy-machine tests."""
from bytesup.llama.responses import decode_tokens_per_s
TITLE = "Decode (busy test)"
def main(ctx):
    done = [ctx.server.completion("def fibonacci(n):\\\\n    if n", n_predict=16, temperature=0, seed=42,
                                  cache_prompt=False, ignore_eos=True) for _ in ctx.track(range(2), "decoding")]
    ctx.measure("decode_tokens_per_s", "tokens/s", [decode_tokens_per_s(d.timings) for d in done], higher_is_better=True)
    return ctx.finish()
'''


@pytest.fixture
def two_cores(tmp_path, monkeypatch):
    """A lesson folder with LESSON, on a hand-made machine of 2 cores whose server decodes with 2 threads, read at the
    load averages the test gives (`loads`)."""
    from bytesup.host import hostbench

    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_decode.py").write_text(LESSON)
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(hostbench, "physical_cores", lambda *_: 2)
    monkeypatch.setattr(load, "MIN_TURN_S", 1e9)   # no reading between turns: the readings are the test's alone

    def loads(*values: float) -> None:
        more = iter(values)
        monkeypatch.setattr(load, "load1", lambda: next(more, values[-1]))
    return loads


def serve(httpx_mock, completion: bool = True) -> None:
    from conftest import load_fixture

    for name, path in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models")]:
        httpx_mock.add_response(url=URL + path, json=load_fixture(name)["response"], is_reusable=True, is_optional=True)
    if completion:
        httpx_mock.add_response(url=URL + "/completion", json=load_fixture("completion_decode")["response"],
                                is_reusable=True, is_optional=True)


def test_a_live_lesson_records_its_readings_and_a_replay_gives_the_same_page(two_cores, tmp_path, httpx_mock):
    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons

    serve(httpx_mock)
    two_cores(1.0, 6.1)
    live, replayed = tmp_path / "live", tmp_path / "replayed"
    assert run_lessons(["01_decode"], RunOptions(server_url=URL, out=live)) == 0
    recorded = json.loads((live / "01_decode.json").read_text())["host_values"][busy.HOST_VALUE]
    # The conftest's machine has no /proc: no CPU figures; two identical samples collapse into nothing.
    assert recorded == {"cores": 2, "server_threads": 2, "cpu": None, "stretches": [], "collapsed": [],
                        "load_average": [{"at": "before", "load1": 1.0}, {"at": "after", "load1": 6.1}]}
    page = (live / "01_decode.md").read_text()
    assert page.splitlines()[2].startswith("Warning: the machine was busy: load average 6.1 on 2 cores (after)")
    two_cores(0.1)   # a replay reads no machine: it gives the recorded readings, whatever the machine does now
    assert run_lessons(["01_decode"], RunOptions(replay=live, out=replayed)) == 0
    for name in ("01_decode.json", "01_decode.md"):
        assert (replayed / name).read_bytes() == (live / name).read_bytes(), name


def test_a_request_that_times_out_on_a_busy_machine_says_so(two_cores, tmp_path, httpx_mock):
    import httpx

    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons

    serve(httpx_mock, completion=False)
    httpx_mock.add_exception(httpx.ReadTimeout("timed out"), url=URL + "/completion", is_reusable=True)
    two_cores(1.0, 6.1)
    out = tmp_path / "run"
    assert run_lessons(["01_decode"], RunOptions(server_url=URL, out=out)) == 1
    error = json.loads((out / "manifest.json").read_text())["lessons"]["01_decode"]["error"]
    assert "did not answer /completion within" in error
    assert "; the machine was busy: load average 6.1 on 2 cores (now), above 3.5" in error


def test_the_reports_account_says_how_loaded_the_machine_was_or_nothing_for_an_older_run(tmp_path):
    l6 = lesson4(quiet()).model_copy(update={"lesson_id": "06_attention_kv_cache"})
    quiet_run = run_of(tmp_path / "quiet", lesson4(quiet()), l6)
    assert report.machine_load_text(quiet_run) == ("quiet during each of the 2 lessons that read it; at most load average "
                                                   "2.1 on 2 cores")
    assert report.machine_load_text(run_of(tmp_path / "mixed", lesson4(BUSY), l6)) == (
        "busy during 04_next_token (see the warnings), quiet during 1 of 2")
    assert report.machine_load_text(run_of(tmp_path / "older", lesson4(None))) is None
