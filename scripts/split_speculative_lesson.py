"""Give a run folder recorded before lesson 5b existed its two lessons' files, from a replay of its recordings.

    .venv/bin/python scripts/split_speculative_lesson.py RUN_DIR [--into DIR]

Such a run holds speculative decoding inside lesson 5's result and recording (bytesup.store.moved says
which parts). This replays `05_generating_text` and `05b_speculative_decoding` from RUN_DIR (nothing is
measured, no server is started) and writes both lessons' JSON, Markdown, exchanges and plots back into
RUN_DIR, with lesson 5b's entry in its manifest after lesson 5's. With --into DIR, lesson 5b goes to a run
folder of its own instead (the lessons' test fixtures are one folder per lesson). A folder already split
is left as it is. Refresh the folder's README.md and check files with `bytesup report RUN_DIR` after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bytesup.files import file_sha256, write_json_atomic
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons
from bytesup.store import moved
from bytesup.store.runs import read_manifest

FILES = ("{}.json", "{}.md", "http/{}.jsonl")


def lesson_files(folder: Path, lesson_id: str) -> list[Path]:
    plots = sorted((folder / "plots").glob(f"{lesson_id}-*")) if (folder / "plots").is_dir() else []
    return [folder / f.format(lesson_id) for f in FILES if (folder / f.format(lesson_id)).is_file()] + plots


def copy_lesson(source: Path, target: Path, lesson_id: str) -> None:
    for path in lesson_files(source, lesson_id):
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)


def split_run(run_dir: Path, into: Path | None) -> str:
    old = json.loads((run_dir / f"{moved.FROM}.json").read_text(encoding="utf-8"))
    if not moved.has_moved_part(old):
        return f"{run_dir}: lesson 5 holds no speculative decoding; nothing to split"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "replay"
        code = run_lessons([moved.FROM, moved.TO], RunOptions(replay=run_dir, out=out, command=["split"]))
        if code != 0:
            raise SystemExit(f"the replay of {run_dir} failed: see {out / 'manifest.json'}")
        replayed = read_manifest(out) or {}
        for path in [p for p in lesson_files(run_dir, moved.FROM) if p.parent.name == "plots"]:
            path.unlink()
        copy_lesson(out, run_dir, moved.FROM)
        if into is not None:
            into.mkdir(parents=True, exist_ok=True)
            copy_lesson(out, into, moved.TO)
            lone = dict(replayed)
            lone["lessons"] = {moved.TO: replayed["lessons"][moved.TO]}
            write_json_atomic(into / "manifest.json", lone)
            shutil.copyfile(out / "README.md", into / "README.md")
        else:
            copy_lesson(out, run_dir, moved.TO)
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    lessons = {}
    for lid, entry in manifest["lessons"].items():
        lessons[lid] = entry
        if lid == moved.FROM:
            entry["http_sha256"] = file_sha256(run_dir / "http" / f"{moved.FROM}.jsonl")
            if into is None:
                lessons[moved.TO] = {**entry, "title": moved.TO_TITLE, "json": f"{moved.TO}.json",
                                     "markdown": f"{moved.TO}.md",
                                     "http_sha256": file_sha256(run_dir / "http" / f"{moved.TO}.jsonl")}
    manifest["lessons"] = lessons
    write_json_atomic(run_dir / "manifest.json", manifest)
    return f"{run_dir}: split into {moved.FROM} and {moved.TO}" + (f" (in {into})" if into else "")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--into", type=Path, default=None, help="a run folder of its own for lesson 5b")
    args = parser.parse_args(argv)
    print(split_run(args.run_dir, args.into))


if __name__ == "__main__":
    main(sys.argv[1:])
