"""Golden replays: every run folder committed under outputs/ regenerates, from its own recordings,
every lesson's JSON and Markdown byte for byte; the newest through `bytesup run-all --replay … --report`, which
writes its pages as well."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import gguf_parsed_once
from test_compare import invoke

from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons
from bytesup.store.render import anchor

ROOT = Path(__file__).resolve().parents[1]


def committed_runs() -> list[Path]:
    """Run folders tracked by git under outputs/ (a local, uncommitted run is not a reference)."""
    listed = subprocess.run(["git", "ls-files", "outputs/*/manifest.json"], cwd=ROOT, capture_output=True, text=True)
    return sorted((ROOT / line).parent for line in listed.stdout.splitlines() if line.strip())


RUNS = committed_runs()


def test_a_reference_run_is_committed():
    assert RUNS, "commit one reference run made with `make run` under outputs/"


# Lessons 4 and 8 recompute numpy's forward pass from the trained model's widths on every replay (the same bits on
# any CPU); they are built here the first time, as `bytesup model build` would, so a fresh clone replays as well. The
# three derived from the shipped file read its metadata once (conftest.gguf_parsed_once): 10.5 s -> 7.4 s for the three
# on the 2-core machine.
WIDTHS = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")


@pytest.fixture(scope="module")
def widths() -> None:
    from bytesup.models.catalog import ensure_model

    with gguf_parsed_once():
        for name in WIDTHS:
            ensure_model(name)


@pytest.fixture(scope="module")
def newest_replayed(widths, tmp_path_factory):
    """The newest committed run replayed the way a reader replays one, `bytesup run-all --replay RUN --out OUT
    --report`: every lesson it holds, then its checks and both pages. (The folder, and what the command printed.)"""
    out = tmp_path_factory.mktemp("newest") / "replayed"
    return out, invoke("run-all", "--replay", RUNS[-1], "--out", out, "--report")


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_replay_matches_committed_files(run_dir, tmp_path, widths, request):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ok = [lid for lid, e in manifest["lessons"].items() if e["status"] in ("ok", "skipped")]
    assert ok
    if run_dir == RUNS[-1]:
        out, result = request.getfixturevalue("newest_replayed")
        assert result.exit_code == 0, result.output
    else:
        out = tmp_path / "replay"
        assert run_lessons(ok, RunOptions(replay=run_dir, out=out, command=["golden"])) == 0
    for lid in ok:
        for name in (f"{lid}.json", f"{lid}.md"):
            assert (out / name).read_text(encoding="utf-8") == (run_dir / name).read_text(encoding="utf-8"), f"{run_dir.name}/{name}"


def test_run_all_with_report_replays_a_committed_run_and_prints_both_pages(newest_replayed):
    out, result = newest_replayed
    assert result.exit_code == 0, result.output
    assert f"page: {out / 'report.html'}" in result.output.replace("\n", "")
    page = (out / "report.html").read_text(encoding="utf-8")
    titles = [json.loads(p.read_text(encoding="utf-8"))["title"] for p in sorted(RUNS[-1].glob("0*.json"))]
    assert len(titles) == 10
    positions = [page.index(f'<h2 id="{anchor(t)}">') for t in titles]
    assert positions == sorted(positions)  # course order
