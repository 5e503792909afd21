"""Replaying a lesson from its recorded fixture run, for the lessons' tests.

Fixture runs live in tests/fixtures/runs/<lesson_id>/ and are recorded from the real embedded
engine by scripts/record_lesson_fixtures.sh (never written by a test).
"""

from __future__ import annotations

import json
from pathlib import Path

from bytesup.results import LessonResult, load_result
from bytesup.runner import RunOptions, run_lessons

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"


def recorded(lesson_id: str) -> Path:
    folder = FIXTURE_RUNS / lesson_id
    if not (folder / f"{lesson_id}.json").is_file():
        raise FileNotFoundError(f"no recorded run for {lesson_id}: run scripts/record_lesson_fixtures.sh {lesson_id}")
    return folder


def recorded_model(lesson_id: str) -> Path:
    """The model the lesson was recorded on, fetched or built here (every model's bytes are the same everywhere)."""
    from bytesup.models import ensure_model

    manifest = json.loads((recorded(lesson_id) / "manifest.json").read_text(encoding="utf-8"))
    return ensure_model(Path(manifest["model"]["path"]).stem)


def replay(lesson_id: str, tmp_path: Path) -> LessonResult:
    """Replay the lesson from its recording; the regenerated JSON and Markdown must equal the recorded ones."""
    source = recorded(lesson_id)
    out = tmp_path / f"replay-{lesson_id}"
    code = run_lessons([lesson_id], RunOptions(replay=source, out=out, command=["test"]))
    assert code == 0, (out / "manifest.json").read_text()
    for name in (f"{lesson_id}.json", f"{lesson_id}.md"):
        assert (out / name).read_text(encoding="utf-8") == (source / name).read_text(encoding="utf-8"), name
    return load_result(json.loads((out / f"{lesson_id}.json").read_text(encoding="utf-8")), lesson_id)


def recorded_exchanges(lesson_id: str) -> list[dict]:
    """Every HTTP exchange of the lesson's recorded run, in order."""
    from bytesup.storage import read_jsonl

    return read_jsonl(recorded(lesson_id) / "http" / f"{lesson_id}.jsonl")


def run_bandwidth(lesson_id: str, result: LessonResult) -> dict:
    """The bandwidth reading the recorded lesson used: the run's one reading in its manifest
    (`host_bandwidth.before`), or, for a run recorded before readings were shared, its own."""
    manifest = json.loads((recorded(lesson_id) / "manifest.json").read_text(encoding="utf-8"))
    before = (manifest.get("host_bandwidth") or {}).get("before")
    return before if before is not None else result.host_values["read_bandwidth"]
