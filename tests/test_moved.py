"""A run recorded before lesson 5b existed: lesson 5's result and recording hold speculative decoding, and
both lessons replay from them (`bytesup.store.moved`) to the files each lesson writes now."""

from __future__ import annotations

import json
import shutil

import pytest

from bytesup.check.compare import load_run
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons
from bytesup.store import moved
from bytesup.store.rows import cells, column, columns

from lessonkit import recorded


def older_run(tmp_path):
    """Lesson 5 and 5b's recorded fixtures joined back into one lesson 5, as a run of before wrote it."""
    five, spec = recorded(moved.FROM), recorded(moved.TO)
    a = json.loads((five / f"{moved.FROM}.json").read_text(encoding="utf-8"))
    b = json.loads((spec / f"{moved.TO}.json").read_text(encoding="utf-8"))
    for key in ("tables", "measurements", "plots", "notes"):
        a[key] += b[key]
    a["settings"]["speculative"] = b["settings"]["speculative"]
    a["host_values"] = {**a["host_values"], **b["host_values"]}
    run = tmp_path / "older"
    shutil.copytree(five, run)
    (run / f"{moved.FROM}.json").write_text(json.dumps(a, ensure_ascii=False, indent=2), encoding="utf-8")
    with (run / "http" / f"{moved.FROM}.jsonl").open("a", encoding="utf-8") as out:
        out.write((spec / "http" / f"{moved.TO}.jsonl").read_text(encoding="utf-8"))
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    manifest["lessons"][moved.FROM].pop("http_sha256", None)
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return run, a


def test_split_moves_every_speculative_part_by_name(tmp_path):
    _, old = older_run(tmp_path)
    rest, part = moved.split(old)
    assert part is not None and part["lesson_id"] == moved.TO and part["title"] == moved.TO_TITLE
    # each table's main-text view, then the full table it narrows
    assert [t["name"] for t in part["tables"]] == [f"speculative_{name}{end}" for name in
                                                   ("costs", "measured", "vs_arithmetic", "client_clock") for end in ("_main", "")]
    assert not [t for t in rest["tables"] if t["name"].startswith("speculative")]
    assert {m["name"] for m in part["measurements"]} == {"spec_model_decode_tokens_per_s", "spec_decode_tokens_per_s"}
    assert len(rest["measurements"]) + len(part["measurements"]) == len(old["measurements"])
    assert "speculative" not in rest["settings"] and part["settings"] == {"speculative": old["settings"]["speculative"]}
    assert list(rest["host_values"]) == ["identity", "repeat", "client_clock"]
    assert "speculation_support" in part["host_values"] and "client_clock" in part["host_values"]
    assert "facts" not in part and rest["facts"] == old["facts"]
    # a result of now holds nothing to move
    assert moved.split(rest) == (rest, None) and not moved.has_moved_part(rest)


@pytest.mark.parametrize("lesson_id", [moved.FROM, moved.TO])
def test_both_lessons_replay_from_the_older_recording(tmp_path, lesson_id):
    run, _ = older_run(tmp_path)
    out = tmp_path / "replay"
    assert run_lessons([lesson_id], RunOptions(replay=run, out=out, command=["test"])) == 0
    for name in (f"{lesson_id}.json", f"{lesson_id}.md"):
        assert (out / name).read_text(encoding="utf-8") == (recorded(lesson_id) / name).read_text(encoding="utf-8"), name


def test_an_older_run_is_read_as_two_lessons(tmp_path):
    run, _ = older_run(tmp_path)
    read = load_run(run)
    assert list(read.results) == [moved.FROM, moved.TO]
    assert read.results[moved.TO].settings["speculative"]["runs"]


def test_rows_need_a_column_on_every_field():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Row:
        a: int = column("a", "ms")
        b: str = column("b")

    @dataclass(frozen=True)
    class Bare:
        a: int

    assert columns(Row) == [("a", "ms"), ("b", "")] and cells([Row(1, "x"), Row(2, "y")]) == [[1, "x"], [2, "y"]]
    with pytest.raises(TypeError):
        columns(Bare)
