"""Reading run folders back: the manifest, every lesson's result, and a lesson's recording.

A run folder (`outputs/<date>/`, written by `bytesup run`) holds `manifest.json`, `<id>.json`,
`<id>.md`, `http/<id>.jsonl` and `plots/`. `load_run` reads it for compare, check and report;
`load_replay` reads one lesson's result and exchanges for a replay.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bytesup.errors import RunFolderError
from bytesup.store import moved
from bytesup.store.identity import model_facts
from bytesup.store.manifest import LessonEntry, Manifest
from bytesup.store.results import LessonResult, load_result
from bytesup import files
from bytesup.files import file_sha256

LOCK_FILE = ".bytesup.lock"  # held with flock by the run writing the folder (run.folder.RunLock)
LESSON_JSON = re.compile(r"^(\d\d[a-z]?_[a-z0-9_]+)\.json$")
LESSON_ID = re.compile(r"^\d\d[a-z]?_[a-z0-9_]+$")  # a lesson id names a file inside the run folder, never a path


def read_manifest(run_dir: Path) -> Manifest | None:
    """The run's manifest.json, upgraded to this schema and typed; None when the folder has none."""
    path = run_dir / "manifest.json"
    refuse_link(path, "the run's manifest")
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise RunFolderError(f"{path} is not valid JSON ({exc}). The run folder is damaged: re-run the lessons "
                             "into a new folder (or restore manifest.json from a copy).") from None
    except RecursionError:
        raise RunFolderError(f"{path} nests its JSON too deeply to be a bytesup manifest. The run folder is damaged: "
                             "re-run the lessons into a new folder (or restore manifest.json from a copy).") from None
    lessons = data.get("lessons", {}) if isinstance(data, dict) else {}
    if not isinstance(lessons, dict) or any(not LESSON_ID.match(str(k)) or not isinstance(v, dict) for k, v in lessons.items()):
        raise RunFolderError(f"{path} lists lessons that are not lesson ids (NN_name) with their entries. The run folder "
                             "is damaged or was edited: re-run the lessons into a new folder.")
    manifest = Manifest.parse(data, str(path))
    running = [e for e in manifest.lessons.values() if e.status == "running"]
    if running and not run_is_live(run_dir):
        # The run died without a word (kill -9, a power cut): what it was running is read as interrupted.
        for entry in running:
            entry.status = "interrupted"
            entry.error = "the run's process is gone (killed before it could save this lesson's end); --resume runs it again"
    return manifest


def run_is_live(run_dir: Path) -> bool:
    """Whether a run holds the folder's lock now (the kernel drops it when that run's process dies)."""
    if not files.has_flock():  # Windows: the process the lock file names still runs
        try:
            holder = json.loads((run_dir / LOCK_FILE).read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return False
        return isinstance(holder, dict) and files.holder_alive(holder)
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        files.fcntl.flock(fd, files.fcntl.LOCK_SH | files.fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EACCES)
    finally:
        os.close(fd)
    return False


# --- one file of a run folder --------------------------------------------------------------

def refuse_link(path: Path, what: str) -> None:
    """A file of a run folder is read only where it lies: a symlink (to another run's file, say) is refused."""
    if path.is_symlink():
        raise RunFolderError(
            f"{path} is a symbolic link, not a file of the run folder, so {what} was not read from it: a run folder's "
            "files are read only where the run wrote them. Replace the link with the file itself (a copy of the run "
            "made with `cp -rL` does that), or re-run the lesson into a new folder.")


def read_lesson_json(json_path: Path, lesson_id: str, entry: LessonEntry | None) -> Any:
    """A lesson's <id>.json as JSON, once it is a file of the folder (no link), has the sha256 the manifest
    recorded for it (manifests written before that was kept have none) and names the lesson it is read for.
    A file of lesson 05 stands for lesson 05b too (a run recorded before 05b existed)."""
    refuse_link(json_path, f"the result of {lesson_id}")
    raw = json_path.read_bytes()
    expected = entry.json_sha256 if entry is not None else None
    if expected and hashlib.sha256(raw).hexdigest() != expected:
        raise RunFolderError(
            f"{json_path} has changed since the run wrote it (its sha256 differs from the one in the run's "
            f"manifest.json), so the result of {lesson_id} was not read from it. Restore the file from a copy of the "
            f"run, or re-run the lesson with `bytesup run {lesson_id} --out {json_path.parent} --force`.")
    data = json.loads(raw.decode("utf-8"))
    named = data.get("lesson_id") if isinstance(data, dict) else None
    if named not in (lesson_id, *((moved.FROM,) if lesson_id == moved.TO else ())):
        raise RunFolderError(
            f"{json_path} holds the result of {str(named)[:80]!r}, not of {lesson_id}, so it was not read as "
            f"{lesson_id}'s: a file was copied or renamed over another. Restore the run folder from a copy, or "
            f"re-run the lesson with `bytesup run {lesson_id} --out {json_path.parent} --force`.")
    return data


# --- a whole run ---------------------------------------------------------------------------

@dataclass
class Run:
    """A run folder read back: its manifest (an empty one when the folder has none: `has_manifest`) and its
    lesson results, in order."""

    path: Path
    manifest: Manifest
    results: dict[str, LessonResult]
    problems: list[str] = field(default_factory=list)
    has_manifest: bool = True

    @property
    def name(self) -> str:
        return self.path.name

    def lesson(self, lesson_id: str) -> LessonResult | None:
        return self.results.get(lesson_id)

    def model_identity(self) -> dict[str, Any]:
        """file, size_bytes, sha256 of the served model: from the manifest, else from a lesson."""
        return model_facts(self.manifest, self.results.values())


def _lesson_ids(files: list[Path]) -> list[str]:
    return [m.group(1) for p in files if (m := LESSON_JSON.match(p.name))]


def load_run(path: Path) -> Run:
    """Read a run folder written by `bytesup run`; every problem is one clear BytesupError."""
    path = Path(path)
    if not path.exists():
        raise RunFolderError(f"{path} does not exist. Pass a run folder written by `bytesup run` (e.g. outputs/<date>/).")
    if not path.is_dir():
        raise RunFolderError(f"{path} is a file, not a run folder. Pass the folder that holds manifest.json "
                             "and the lessons' <id>.json files.")
    read = read_manifest(path)
    if read is not None and not read.is_run():
        raise RunFolderError(f"{path / 'manifest.json'} is a {read.kind!r} file, not a bytesup run manifest. "
                             "Pass a folder written by `bytesup run`.")
    manifest = read or Manifest()

    files = sorted(p for p in path.iterdir() if p.is_file() and LESSON_JSON.match(p.name))
    if read is None and not files:
        raise RunFolderError(
            f"{path} is not a bytesup run folder: it has no manifest.json and no lesson results "
            "(<id>.json such as 04_next_token.json). Pass a folder written by `bytesup run`, "
            "e.g. outputs/<date>/."
        )
    order = list(manifest.lessons)
    order += [lid for lid in _lesson_ids(files) if lid not in order]
    results: dict[str, LessonResult] = {}
    problems: list[str] = []
    for lid in sorted(order):
        json_path = path / f"{lid}.json"
        entry = manifest.lessons.get(lid)
        if not json_path.is_file():
            status = entry.status if entry and entry.status else "missing"
            problems.append(f"{lid}: {status}" + (f" ({entry.error[:200]})" if entry and entry.error else ", no result file"))
            continue
        if entry and entry.status == "skipped":
            # Neither ok nor failed: its page says what it did not measure, and the command that enables it.
            problems.append(f"{lid}: skipped, nothing measured here ({(entry.skip_reason or '')[:200]}); "
                            f"`{entry.enable_command}` enables it")
        elif entry and entry.status != "ok":
            # A result the manifest marks failed, interrupted or still running is never shown or checked.
            problems.append(f"{lid}: {entry.status}; its {json_path.name} is not used"
                            + (f" ({entry.error[:200]})" if entry.error else ""))
            continue
        try:
            data = read_lesson_json(json_path, lid, entry)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunFolderError(f"{json_path} is not valid JSON ({exc}). Re-run that lesson with "
                                 f"`bytesup run {lid} --out {path} --force`.") from None
        try:
            data, part = moved.split(data) if lid == moved.FROM else (data, None)
            results[lid] = load_result(data, str(json_path))
            # A run recorded before lesson 5b existed: its part of lesson 5's result is read as lesson 5b.
            if part is not None and moved.TO not in order:
                results[moved.TO] = load_result(part, str(json_path))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RunFolderError(
                f"{json_path} is not a lesson result this bytesup can read: {'.'.join(map(str, first['loc']))}: {first['msg']}. "
                "It may come from a modified bytesup; re-run the lesson, or read it with the bytesup that wrote it."
            ) from None
    return Run(path=path, manifest=manifest, results=results, problems=problems, has_manifest=read is not None)


# --- one lesson's recording, for a replay ----------------------------------------------------

@dataclass
class ReplaySource:
    result: LessonResult
    exchanges: list[dict]
    recorded: dict = field(default_factory=dict)  # the recorded <id>.json, to compare the replay with


def load_replay(run_dir: Path, lesson_id: str, entry: LessonEntry | None = None, allow_modified: bool = False) -> ReplaySource:
    """A recorded lesson: its result and exchanges. The exchanges must still have the sha256 the
    manifest recorded (`entry`), unless `allow_modified`; a damaged file is a RunFolderError."""
    json_path = run_dir / f"{lesson_id}.json"
    if lesson_id == moved.TO and not json_path.is_file() and (run_dir / f"{moved.FROM}.json").is_file():
        # A run recorded before lesson 5b existed: lesson 5b replays from lesson 5's result and recording.
        json_path = run_dir / f"{moved.FROM}.json"
        manifest = read_manifest(run_dir)
        entry = manifest.lessons.get(moved.FROM, entry) if manifest is not None else entry
    if not json_path.is_file():
        raise RunFolderError(
            f"{run_dir} has no recorded result for {lesson_id} ({json_path.name} is missing). "
            "Replay a run folder written by `bytesup run` that includes this lesson."
        )
    try:
        recorded = read_lesson_json(json_path, lesson_id, entry)
        older = json_path.name == f"{moved.FROM}.json" and moved.has_moved_part(recorded)
        if older:
            rest, part = moved.split(recorded)
            recorded = part if lesson_id == moved.TO else rest
        if recorded is None or (lesson_id == moved.TO and not older and json_path.name != f"{lesson_id}.json"):
            raise RunFolderError(f"{run_dir} has no recorded result for {lesson_id}: its {json_path.name} holds "
                                 "no speculative decoding. Replay a run folder that includes this lesson.")
        result = load_result(json.loads(json.dumps(recorded)), str(json_path))
    except (ValueError, ValidationError) as exc:
        raise RunFolderError(f"{json_path} is damaged ({str(exc).splitlines()[0]}), so {lesson_id} cannot be replayed. "
                             "The other lessons are replayed; re-record this one against a live server.") from None
    http = run_dir / (result.exchanges or f"http/{lesson_id}.jsonl")
    refuse_link(http, f"the recording of {lesson_id}")
    if not http.is_file():
        return ReplaySource(result=result, exchanges=[], recorded=recorded)
    expected = entry.http_sha256 if entry is not None else None
    if expected and not allow_modified and file_sha256(http) != expected:
        raise RunFolderError(
            f"{http} has changed since it was recorded (its sha256 differs from the one in the run's "
            f"manifest.json), so {lesson_id} was not replayed from it. Replay an unmodified copy of the run, "
            "or pass --allow-modified to replay a recording you edited on purpose."
        )
    exchanges = []
    for n, line in enumerate(http.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            exchange = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise RunFolderError(
                f"Line {n} of {http} is not valid JSON ({why}): the recording is truncated or damaged, "
                f"so {lesson_id} cannot be replayed. The other lessons are replayed; re-record this one "
                "against a live server."
            ) from None
        if not isinstance(exchange, dict):
            raise RunFolderError(
                f"Line {n} of {http} is a JSON {type(exchange).__name__}, not a recorded exchange (an object): the "
                f"recording is damaged, so {lesson_id} cannot be replayed. Re-record this one against a live server.")
        exchanges.append(exchange)
    if older:  # one lesson's part of a recording made before lesson 5b: what its replay writes
        recorded.update({"exchanges": f"http/{lesson_id}.jsonl", "exchange_count": len(moved.own_exchanges(lesson_id, exchanges))})
    return ReplaySource(result=result, exchanges=exchanges, recorded=recorded)


def held_lessons(run_dir: Path, lesson_ids: list[str]) -> tuple[list[str], list[str]]:
    """(the lessons of `lesson_ids` whose recorded result `run_dir` holds, those it lacks), in the given order.
    Lesson 5b is held in a run recorded before it existed when lesson 5's result still carries its part."""
    held: list[str] = []
    for lid in lesson_ids:
        if (run_dir / f"{lid}.json").is_file():
            held.append(lid)
        elif lid == moved.TO and (run_dir / f"{moved.FROM}.json").is_file():
            try:
                data = json.loads((run_dir / f"{moved.FROM}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(data, dict) and moved.has_moved_part(data):
                held.append(lid)
    return held, [lid for lid in lesson_ids if lid not in held]
