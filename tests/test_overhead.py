"""The harness's own time per request (`bytesup.check.overhead`), on lesson 5's recorded run with its
wall times replaced by known ones: server time + 1 ms, + 2 ms, … so every overhead is known by hand."""

from __future__ import annotations

import json
import shutil

import pytest

from bytesup.check import overhead
from bytesup.run.report import report_md
from bytesup.store.runs import load_run

from lessonkit import recorded

LESSON = "05_generating_text"


def planted_run(tmp_path):
    """A copy of the recorded run whose k-th timed /completion took its server time + k ms on the client."""
    run_dir = tmp_path / "run"
    shutil.copytree(recorded(LESSON), run_dir)
    path = run_dir / "http" / f"{LESSON}.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    k = 0
    for line in lines:
        timings = overhead._final_timings(line) if line["path"] == "/completion" else None
        if timings is not None:
            k += 1
            line["elapsed_ms"] = timings["prompt_ms"] + timings["predicted_ms"] + k
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return run_dir, k, sum(1 for line in lines if "stream" in line)


def test_every_timed_request_counts_once_with_its_own_overhead(tmp_path):
    run_dir, n, streamed = planted_run(tmp_path)
    (row,) = overhead.run_overheads(load_run(run_dir))
    assert row.lesson_id == LESSON and row.streamed == streamed >= 2   # the loop's repeats
    assert row.overheads_ms == pytest.approx([float(k) for k in range(1, n + 1)])
    # 1 … n: the median is (n + 1) / 2, p90 lies at rank 0.9 × (n − 1), the largest is n.
    assert row.median == pytest.approx((n + 1) / 2)
    assert row.p90 == pytest.approx(1 + 0.9 * (n - 1))
    assert row.largest == pytest.approx(n)


def test_the_stream_counts_to_its_final_event(tmp_path):
    """A streamed exchange's server time comes from its final event's timings."""
    line = next(e for e in (json.loads(x) for x in (recorded(LESSON) / "http" / f"{LESSON}.jsonl").read_text().splitlines())
                if "stream" in e)
    final = json.loads(line["stream"][-1]["text"].removeprefix("data: "))
    assert overhead._final_timings(line) == final["timings"]


def test_the_report_has_the_table(tmp_path):
    run_dir, n, streamed = planted_run(tmp_path)
    page = report_md(load_run(run_dir), None)
    assert "## The harness's own time per request" in page
    section = page.split("## The harness's own time per request", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith(f"| `{LESSON}` |"))
    assert row.split(" | ")[1:3] == [str(n), str(streamed)]
    assert len(row.strip("|").split(" | ")) == 6 and not row.endswith(("| yes |", "| no |"))
    # The recorded run split nothing: the harness's budget is not judged on the whole outside part.
    assert "This run did not split that time" in section and "within budget" not in section


def test_a_run_without_timed_requests_has_no_table(tmp_path):
    run_dir, _, _ = planted_run(tmp_path)
    shutil.rmtree(run_dir / "http")
    assert overhead.overhead_blocks(load_run(run_dir)) == []
