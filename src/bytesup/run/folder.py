"""What keeps a run folder whole: one run at a time (a lock), a fresh folder for each new run,
a resume that refuses to mix two configurations, failed lessons set aside, recordings verified.

The runner (`runner.run_lessons`) uses these; each piece is small enough to test on its own.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from rich.console import Console

from bytesup.host import spent
from bytesup.host.environment import utc_now
from bytesup.llama import process
from bytesup.errors import BytesupError, RunFolderError
from bytesup.store.escape import md_text, rich_text
from bytesup.store.identity import resume_differences
from bytesup.store.manifest import LessonEntry, Manifest
from bytesup.options import RunOptions
from bytesup.paths import outputs_root
from bytesup.store.plots import write_plots
from bytesup.store.render import lesson_md
from bytesup.store.results import LessonResult
from bytesup.store.runs import LOCK_FILE
from bytesup import files
from bytesup.run.timing import split_md
from bytesup.files import dumps, write_json_atomic, write_jsonl_atomic, write_text_atomic

DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d+))?$")
# Errors that mean the disk cannot take more: the run stops instead of trying every lesson.
DISK_FULL = {errno.ENOSPC, errno.EDQUOT}



# --- one run at a time ---------------------------------------------------------------------

class RunLock:
    """An exclusive lock on a run folder: `.bytesup.lock`, held with flock while the run lives.

    The kernel drops the lock when its process dies (even by kill -9), so a lock file whose lock
    is free was left by a dead run: it is taken over and `acquire` says so. The file tells who
    holds it (pid, start time, command), for the message a second run gets."""

    def __init__(self, run_dir: Path, command: list[str], created: bool = False):
        self.run_dir = run_dir
        self.path = run_dir / LOCK_FILE
        self.command = command
        self.created = created  # the folder was made for this run: removed again if left empty
        self._fd: int | None = None

    def acquire(self) -> str | None:
        """Take the lock; returns a sentence when a dead run's lock was taken over. A folder that cannot be made
        or written is a RunFolderError that says why (`cannot_write`)."""
        hint = "Give --out a folder on a disk you can write to (or leave --out out to use outputs/)."
        if not self.run_dir.exists():
            try:
                self.run_dir.mkdir(parents=True)
            except OSError as exc:
                raise cannot_write(self.run_dir, exc, hint) from None
            self.created = True
        if not files.has_flock():
            return self._acquire_by_pid(hint)
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                self.release()
                raise cannot_write(self.run_dir, exc, hint) from None
            try:
                files.fcntl.flock(fd, files.fcntl.LOCK_EX | files.fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
                raise RunFolderError(self._held_message(_read_holder(self.path))) from None
            # The file may have been removed (by the run that held it) between open and flock.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _read_holder(self.path)
            os.ftruncate(fd, 0)
            return self._hold(fd, previous)
        raise RunFolderError(f"Could not lock {self.run_dir}: its lock file keeps changing. Another run may be starting; try again.")

    def _hold(self, fd: int, previous: dict) -> str | None:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": utc_now(), "command": self.command,
              "process_started": files.process_started(os.getpid())}
        os.write(fd, (json.dumps(me) + "\n").encode())
        self._fd = fd
        if previous.get("pid"):
            return (f"{self.run_dir} was locked by a run that is no longer running (pid {previous.get('pid')}, "
                    f"started {previous.get('started_at', '?')}); its lock was taken over.")
        return None

    def _acquire_by_pid(self, hint: str) -> str | None:
        """Where the OS has no flock (Windows): the lock file is created only where none is (O_EXCL), and one
        whose holder no longer runs (`files.holder_alive`) was left by a dead run and is taken over."""
        previous: dict = {}
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = _read_holder(self.path)
                if files.holder_alive(holder):
                    raise RunFolderError(self._held_message(holder)) from None
                previous = holder or previous
                with contextlib.suppress(OSError):
                    self.path.unlink()
                continue
            except OSError as exc:
                self.release()
                raise cannot_write(self.run_dir, exc, hint) from None
            return self._hold(fd, previous)
        raise RunFolderError(f"Could not lock {self.run_dir}: its lock file keeps changing. Another run may be starting; try again.")

    def _held_message(self, holder: dict) -> str:
        command = " ".join(holder.get("command") or []) or "unknown command"
        return (
            f"{self.run_dir} is in use by another bytesup run (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, started {holder.get('started_at', '?')}: {command}). Nothing was changed. "
            "Wait for that run to finish or stop it, or write this run to another folder with --out DIR."
        )

    def release(self) -> None:
        if self._fd is None:
            if self.created:  # made for this run, which never took its lock: removed again if empty
                with contextlib.suppress(OSError):
                    self.run_dir.rmdir()
            return
        if files.has_flock():  # unlinked while locked: no other run can lock this file and lose it to the unlink
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)
        else:  # Windows removes no file that is open
            os.close(self._fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
        self._fd = None
        if self.created:
            with contextlib.suppress(OSError):
                self.run_dir.rmdir()  # only when nothing was written into it

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --- which folder ----------------------------------------------------------------------------

_CANNOT_WRITE = {errno.EROFS: "is on a read-only file system", errno.EACCES: "is a folder you may not write to "
                 "(permission denied)", errno.EPERM: "is a folder you may not write to (operation not permitted)",
                 errno.EEXIST: "is a file, not a folder", errno.ENOTDIR: "lies under a file, not a folder",
                 errno.ENOSPC: "is on a full disk", errno.EDQUOT: "is on a disk where your quota is used up"}


def cannot_write(path: Path, exc: OSError, hint: str) -> RunFolderError:
    """One paragraph for a run folder that cannot be made or written at `path`, from the OSError that said so."""
    why = _CANNOT_WRITE.get(exc.errno or 0, f"cannot be written ({exc.strerror or exc})")
    return RunFolderError(f"{path} {why}, so the run cannot write its folder there. Nothing was written, there or "
                          f"anywhere else. {hint}")


def new_run_dir(root: Path, date: str) -> Path:
    """The next free `<date>`, `<date>.2`, `<date>.3`… under `root`, created (so claimed) here. A root that is a
    file, read-only or not writable is a RunFolderError that names BYTESUP_OUTPUTS where it set the root."""
    moved = os.environ.get("BYTESUP_OUTPUTS")
    hint = ("Set BYTESUP_OUTPUTS to a folder you can write to (or unset it to use outputs/), or pass --out DIR."
            if moved else "Pass --out with a folder you can write to, or set BYTESUP_OUTPUTS to one.")
    where = f"{root} (BYTESUP_OUTPUTS)" if moved else str(root)
    if root.exists() and not root.is_dir():
        raise cannot_write(Path(where), OSError(errno.EEXIST, "File exists"), hint)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(Path(where), exc, hint) from None
    n = 1
    while True:
        candidate = root / (date if n == 1 else f"{date}.{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise cannot_write(Path(where), exc, hint) from None


def _manifests_under(root: Path) -> Iterator[tuple[Path, Manifest]]:
    """(folder, manifest) for every folder under `root` whose manifest.json reads as a manifest; others are skipped."""
    if not root.is_dir():
        return
    for folder in root.iterdir():
        path = folder / "manifest.json"
        try:
            yield folder, Manifest.parse(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, ValueError, RecursionError, BytesupError):
            continue


def latest_unfinished(root: Path) -> Path | None:
    """The most recently updated run folder under `root` whose manifest is not complete."""
    found = [(data.updated_at or "", (folder / "manifest.json").stat().st_mtime, folder)
             for folder, data in _manifests_under(root) if data.status != "complete"]
    return max(found)[2] if found else None


def fmt_seconds(seconds: float) -> str:
    """12 s, 3 min 05 s, 2 h 30 min."""
    whole = round(seconds)
    if whole >= 3600:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def _repeat(manifest: Manifest) -> int | None:
    value = manifest.options.repeat if manifest.options is not None else None
    return value if value is not None and value > 0 else None


def estimate(root: Path, manifest: Manifest, todo: list[str], skip: Path | None = None) -> str:
    """One line: how long `todo` will take, from the latest earlier run under `root` that measured with the same
    configuration (`resume_differences` finds none) and timed every lesson in `todo`. Failing that, from one that
    differs in --repeat alone, its time scaled by the ratio of repeats (an upper bound: a lesson's untimed
    requests do not repeat); else that there is none."""
    best: tuple[bool, str, Path, float, int | None] | None = None  # (same --repeat, when, folder, seconds, its --repeat)
    mine = _repeat(manifest)
    for folder, data in _manifests_under(root):
        if skip is not None and folder.resolve() == skip.resolve():
            continue
        entries = [data.lessons.get(lid) or LessonEntry() for lid in todo]
        timed = [e.seconds for e in entries]
        if any(t is None or e.status != "ok" for e, t in zip(entries, timed, strict=True)):
            continue
        diffs = [d.label for d in resume_differences(data, manifest)]
        theirs = _repeat(data)
        if diffs and not (diffs == ["--repeat"] and mine and theirs):
            continue
        key = (not diffs, data.updated_at or "", folder, float(sum(t for t in timed if t is not None)), theirs)
        if best is None or key[:2] > best[:2]:
            best = key
    n = f"{len(todo)} lesson{'s' if len(todo) != 1 else ''}"
    if best is None:
        return f"estimate: none for {n} (no earlier run under {root} measured with this configuration)"
    same, _, folder, seconds, theirs = best
    if same or not mine or not theirs:
        return f"estimate: about {fmt_seconds(seconds)} for {n}, as the comparable run {folder.name} took"
    return (f"estimate: at most about {fmt_seconds(seconds * mine / theirs)} for {n}: the run {folder.name} took "
            f"{fmt_seconds(seconds)} at --repeat {theirs}, scaled to --repeat {mine}")


@dataclass(frozen=True)
class RecordedRequests:
    """A recorded run's requests to /completion in one lesson: how many, their time, and the first one's."""
    count: int
    repeat: int       # the recorded run's --repeat
    folder: str
    total_ms: float   # every one's elapsed_ms added up (0 where the recording times none)
    first_ms: float   # the first one's elapsed_ms (0 where untimed)


def _recorded_completions(roots: list[Path], lesson_id: str, skip: Path | None) -> RecordedRequests | None:
    """The requests to /completion of the latest run under `roots` whose recording of the lesson is whole (the lesson
    ok) and whose --repeat is recorded; None where there is none."""
    found: list[tuple[str, Path, int]] = []
    for root in roots:
        for folder, data in _manifests_under(root):
            entry, theirs = data.lessons.get(lesson_id), _repeat(data)
            if (entry is None or entry.status != "ok" or theirs is None
                    or (skip is not None and folder.resolve() == skip.resolve())):
                continue
            if (folder / "http" / f"{lesson_id}.jsonl").is_file():
                found.append((data.updated_at or "", folder, theirs))
    for _, folder, theirs in sorted(found, key=lambda f: (f[0], str(f[1])), reverse=True):
        try:
            lines = (folder / "http" / f"{lesson_id}.jsonl").read_text(encoding="utf-8").splitlines()
            entries = [e for e in (json.loads(line) for line in lines if line.strip()) if e.get("path") == "/completion"]
            took = [float(e.get("elapsed_ms") or 0) for e in entries]
        except (OSError, ValueError, AttributeError, TypeError, RecursionError):
            continue
        return RecordedRequests(len(entries), theirs, folder.name, sum(took), took[0] if took else 0.0)
    return None


class FirstRequestEstimate:
    """The run's length from its lessons' recorded requests, said once its first /completion is timed: the time the
    recorded runs' requests to /completion took, scaled to this run's --repeat and by how much longer (or shorter)
    this run's first request took than the same lesson's first recorded one. Where the recordings time none, the
    count of requests times the first one's time. For a run no earlier run of its configuration timed."""

    def __init__(self, requests: float, lessons: int, say: Any, recorded: dict[str, RecordedRequests] | None = None,
                 recorded_ms: float = 0.0):
        self.requests, self.lessons, self.say, self.done = requests, lessons, say, False
        self.recorded, self.recorded_ms = recorded or {}, recorded_ms

    def sink(self, lesson_id: str = "") -> list[dict]:
        """A lesson's list of exchanges that tells this estimate of each one appended."""
        return _Watched(self, lesson_id)

    def seen(self, entry: dict, lesson_id: str = "") -> None:
        took = entry.get("elapsed_ms")
        if self.done or entry.get("path") != "/completion" or not isinstance(took, (int, float)) or took <= 0:
            return
        self.done = True
        n = f"{self.lessons} lesson{'s' if self.lessons != 1 else ''}"
        first = self.recorded.get(lesson_id)
        if first is not None and first.first_ms > 0 and self.recorded_ms > 0:
            scale = took / first.first_ms
            self.say(f"estimate: about {fmt_seconds(self.recorded_ms * scale / 1000.0)} for {n} in requests to "
                     f"/completion: they took {fmt_seconds(self.recorded_ms / 1000.0)} in the recorded runs (at this "
                     f"run's --repeat), and this machine's first took {scale:.2g}× the recorded one of {lesson_id} "
                     f"({took / 1000.0:.3g} s against {first.first_ms / 1000.0:.3g} s); starting servers, making "
                     "models, llama-bench and the lessons' own arithmetic come on top")
            return
        self.say(f"estimate: about {fmt_seconds(self.requests * took / 1000.0)} for {n} if each of about "
                 f"{self.requests:,.0f} requests to /completion took as long as the first ({took / 1000.0:.3g} s; "
                 "the recordings time none); the other requests and the rest of each lesson come on top")


class _Watched(spent.StampedList):
    """A lesson's exchanges, stamped as they end (spent.StampedList), each also shown to the estimate."""

    def __init__(self, owner: FirstRequestEstimate, lesson_id: str = ""):
        super().__init__()
        self.owner, self.lesson_id = owner, lesson_id

    def append(self, entry: Any) -> None:
        super().append(entry)
        if isinstance(entry, dict):
            self.owner.seen(entry, self.lesson_id)


def first_request_estimate(roots: list[Path], manifest: Manifest, todo: list[str], say: Any,
                           skip: Path | None = None) -> FirstRequestEstimate | None:
    """Says how many requests to /completion the lessons in `todo` will make at this run's --repeat, counted in the
    latest recorded run of each (`_recorded_completions`), and returns what says the run's length once the first is
    timed; None (after saying why) where a lesson has no recorded run to count from."""
    mine = _repeat(manifest)
    counted: list[tuple[str, RecordedRequests]] = []
    missing: list[str] = []
    for lid in todo:
        rec = _recorded_completions(roots, lid, skip)
        if rec is None:
            missing.append(lid)
        else:
            counted.append((lid, rec))
    if missing or not mine:
        names = ", ".join(missing) or "these lessons"
        say(f"estimate: nor from the lessons' requests: no recorded run of {names} under "
            f"{' or '.join(str(r) for r in roots)} to count them in")
        return None
    total = sum(r.count * mine / r.repeat for _, r in counted)
    timed = all(r.total_ms > 0 or r.count == 0 for _, r in counted)
    recorded_ms = sum(r.total_ms * mine / r.repeat for _, r in counted) if timed else 0.0
    shown = "; ".join(f"{lid}: {r.count:,} in {r.folder} at --repeat {r.repeat}" for lid, r in counted[:3])
    more = f"; and {len(counted) - 3} more" if len(counted) > 3 else ""
    say(f"estimate: the lessons make about {total:,.0f} requests to /completion at --repeat {mine} ({shown}{more}, "
        "scaled by the repeats); the run's length follows once the first is timed")
    return FirstRequestEstimate(total, len(todo), say, dict(counted), recorded_ms)


# --- resuming the same configuration -----------------------------------------------------------

def identity_differences(old: Manifest, new: Manifest) -> list[str]:
    """`old` (the folder's manifest) vs `new` (this run's facts): one line per difference in what a
    resume checks (`identity.resume_differences`)."""
    return [d.sentence("in the folder", "now") for d in resume_differences(old, new)]


# --- a failed lesson -------------------------------------------------------------------------

def lesson_files(run_dir: Path, lesson_id: str) -> list[Path]:
    """A lesson's files in a run folder: result, Markdown, exchanges, plots."""
    files = [run_dir / f"{lesson_id}.json", run_dir / f"{lesson_id}.md", run_dir / "http" / f"{lesson_id}.jsonl"]
    plots = run_dir / "plots"
    if plots.is_dir():
        files += sorted(p for p in plots.iterdir() if p.name.startswith(f"{lesson_id}-"))
    return [p for p in files if p.exists()]


def set_aside(run_dir: Path, lesson_id: str) -> Path | None:
    """Move a lesson's earlier files to `stale/<id>-<UTC time>/`, so that no failed lesson leaves
    a result behind that looks valid. Nothing is deleted. Returns the folder, or None."""
    files = lesson_files(run_dir, lesson_id)
    if not files:
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = run_dir / "stale" / f"{lesson_id}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = run_dir / "stale" / f"{lesson_id}-{stamp}.{n}"
    for path in files:
        dest = target / path.relative_to(run_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), dest)
    return target


# --- recordings ------------------------------------------------------------------------------

def differences(recorded: Any, replayed: Any, where: str = "", limit: int = 5) -> list[str]:
    """Where two JSON values differ, as `path: recorded → replayed` lines (at most `limit`)."""
    out: list[str] = []

    def walk(a: Any, b: Any, at: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(a.keys() | b.keys(), key=str):
                walk(a.get(k, "(absent)"), b.get(k, "(absent)"), f"{at}.{k}" if at else str(k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{at}[{i}]")
        elif a != b:
            out.append(f"{at}: {json.dumps(a, ensure_ascii=False)[:80]} → {json.dumps(b, ensure_ascii=False)[:80]}")

    walk(recorded, replayed, where)
    return out


# --- what to type next -----------------------------------------------------------------------

_DROPPED_WITH_VALUE = {"--out", "--api-key"}
_DROPPED = {"--force", "--resume"}


# scripts/run_course.sh sets this to the `make run …` that started the run, so that the resume command is one
# that works the same way: make's recipe starts the run's own server again.
MAKE_RUN_ENV = "BYTESUP_MAKE_RUN"
_MAKE_RUN_FLAGS = {"bytesup", "run-all", "--own-server", "--report"}  # what run_course.sh adds to ARGS


def resume_command(command: list[str], run_dir: Path) -> str:
    """The run's own command with `--out RUN_DIR --resume` (its --force, --out and API key dropped:
    the key comes from BYTESUP_API_KEY or is typed again). A run started by `make run` is resumed by
    `make run … ARGS='… --out RUN_DIR --resume'`."""
    kept, skip = [], False
    for arg in command or ["bytesup", "run-all"]:
        if skip:
            skip = False
            continue
        if arg in _DROPPED_WITH_VALUE:
            skip = True
            continue
        if arg in _DROPPED or any(arg.startswith(f"{flag}=") for flag in _DROPPED_WITH_VALUE):
            continue
        kept.append(arg)
    via = os.environ.get(MAKE_RUN_ENV)
    if via:
        args = [a for a in kept if a not in _MAKE_RUN_FLAGS]
        return f"{via} ARGS={shlex.quote(shlex.join([*args, '--out', str(run_dir), '--resume']))}"
    return shlex.join([*kept, "--out", str(run_dir), "--resume"])


class DiskFull(BytesupError):
    def __init__(self, where: Path | str, lesson_id: str | None, resume: str):
        at = f" while saving {lesson_id}" if lesson_id else ""
        super().__init__(
            f"No space left on the device that holds {where}{at}. The run stopped: every lesson "
            "finished before is kept, and nothing was overwritten. Free some space (or move outputs/ "
            f"with BYTESUP_OUTPUTS), then continue with `{resume}`."
        )


# --- signals -----------------------------------------------------------------------------------

class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that every `finally` (servers of our own, the
    lock, the manifest) runs before the process exits."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StoppedBeforeLessons(BytesupError):
    """A stop signal that came outside the run's lessons (which mark themselves interrupted), such as while its
    server was starting or its model being built: what was happening, and that nothing of it stays behind."""

    def __init__(self, exc: KeyboardInterrupt):
        self.exit_code = 128 + exc.signum if isinstance(exc, Terminated) else 130
        how = exc.args[0] if isinstance(exc, Terminated) else "Ctrl-C"
        notes = "; ".join(getattr(exc, "__notes__", []))
        if notes:
            said = (f"Stopped by {how} before the run's first lesson began, {notes}. No lesson was run and nothing the "
                    "run had started is left running or behind. Run the same command again to start over.")
        else:
            said = (f"Stopped by {how} outside a lesson. Every server the run started was stopped and its folder "
                    "under .run/ removed; the run folder's manifest.json says which lessons finished. Run the same "
                    "command again (with --out and --resume to keep the finished ones).")
        super().__init__(said)


def stop_signals() -> tuple[int, ...]:
    """The stop signals this OS has: SIGINT, SIGTERM and SIGHUP (Windows has no SIGHUP)."""
    return tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


STOP_SIGNALS = stop_signals()
# The stop signals received inside signals_raise, first one first (the process has one run at a time).
_stopping: list[int] = []


def _stop(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def raise_if_stopping() -> None:
    """Stop here when a stop signal arrived but its exception was lost: Python drops an exception raised
    where none can propagate (a __del__, a weakref callback) after printing 'Exception ignored'. The
    run would otherwise finish its lesson as if no signal had come, and end with status ok."""
    if _stopping:
        raise _stop(_stopping[0])


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP stop the run by raising (KeyboardInterrupt, Terminated), once. A
    signal after the first (Ctrl-C pressed again, a second kill) is only acknowledged: it never
    interrupts the cleanup the first one started (the manifest, the summary, the run's server). Once
    stopping, the process ignores them until it exits: Python puts the default action back while it shuts
    down, and a late Ctrl-C would then kill the process after its cleanup, with no exit status of its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = _stopping
    stopping.clear()

    def handler(signum: int, _frame: Any) -> None:
        if stopping:
            if len(stopping) == 1:
                print("already stopping: saving the manifest and stopping the run's servers first", file=sys.stderr, flush=True)
            stopping.append(signum)
            return
        stopping.append(signum)
        raise _stop(signum)

    previous = {s: signal.signal(s, handler) for s in stop_signals()}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if stopping else h)


PARENT_POLL_S = 0.5


def die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (`make run` killed, even by kill -9), which stops the run as a
    SIGTERM does: from the kernel on Linux (PR_SET_PDEATHSIG), elsewhere from a thread that looks at the parent's
    pid every half second and hands the main thread a SIGTERM once it changed. A parent already gone by the time
    this is set stops it at once."""
    parent = os.getppid()
    hook = process.die_with_parent_hook()
    if hook is not None:
        hook()
    else:
        threading.Thread(target=_watch_parent, args=(parent,), name="bytesup-parent", daemon=True).start()
    if os.getppid() != parent:
        raise Terminated(signal.SIGTERM)


def _watch_parent(parent: int) -> None:
    import _thread
    import time

    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    _thread.interrupt_main(signal.SIGTERM)


# --- the folder, its index and its lessons' files ------------------------------------------------

INDEX_MARK = "<!-- bytesup index -->"


def today_folder() -> Path:
    """outputs/<today's UTC date>."""
    return outputs_root() / datetime.now(timezone.utc).date().isoformat()


def choose_run_dir(options: RunOptions, console: Console) -> tuple[Path, bool]:
    """--out when given; else --resume continues the latest unfinished run under outputs/, and a
    new run gets the next free outputs/<date>[.N]. Returns (folder, created for this run)."""
    if options.out is not None:
        run_dir = options.out.resolve()
        if run_dir.exists() and not run_dir.is_dir():
            raise RunFolderError(f"{run_dir} exists and is not a folder. Choose another --out.")
        return run_dir, False
    root = outputs_root()
    if options.resume:
        found = latest_unfinished(root)
        if found is None:
            raise RunFolderError(
                f"--resume found no unfinished run under {root} to continue. Start a new run without "
                "--resume, or name the folder to continue with --out DIR."
            )
        console.print(f"Resuming {rich_text(found.resolve())}, the latest unfinished run.", highlight=False)
        return found.resolve(), False
    today = today_folder()
    run_dir = new_run_dir(root, today.name).resolve()
    if run_dir.name != today.name:
        console.print(f"Writing to {rich_text(run_dir)} ({rich_text(today.name)} already holds a run).", highlight=False)
    return run_dir, True


def run_readme(run_dir: Path, manifest: Manifest) -> str:
    """The run folder's README.md while no report replaces it: status, host, engine, a line per lesson."""
    lines = [INDEX_MARK, f"# bytesup run {md_text(run_dir.name)}", ""]
    host, eng, model = manifest.host, manifest.engine, manifest.model
    lines.append(md_text(f"Status: **{manifest.status}** · host {host.hostname} "
                         f"({host.cpu}, {host.cores} cores)"))
    lines.append(md_text(f"· engine {eng.engine or '?'} {eng.build or ''} · model {model.path or '?'}"))
    lines.append("")
    lines.append("| lesson | status | time | result |")
    lines.append("|---|---|---|---|")
    for lid, entry in sorted(manifest.lessons.items()):
        link = (f"[{md_text(entry.title or lid, cell=True)}]({lid}.md)" if entry.status in ("ok", "skipped")
                else md_text((entry.error or "")[:200], cell=True))
        if entry.status == "skipped":  # measured nothing here; the command that enables it
            link += md_text(f": nothing measured here; `{entry.enable_command}` enables it", cell=True)
        took = fmt_seconds(entry.seconds) if entry.seconds is not None else ""
        lines.append(f"| `{lid}` | {entry.status} | {took} | {link} |")
    total = manifest.lessons_seconds
    if total is not None:
        lines += ["", md_text(f"The lessons took {fmt_seconds(total)} of wall time in all.")]
    lines += split_md(manifest)  # what came before the lessons, and where each lesson's time went
    return "\n".join(lines) + "\n"


def save_lesson(run_dir: Path, result: LessonResult, exchanges: list[dict]) -> None:
    """Exchanges, plots and Markdown first, the JSON last: a result file means a complete lesson.
    The JSON is made first, so a result that cannot be written (NaN) leaves the folder as it was."""
    dumps(result.to_json(), where=str(run_dir / f"{result.lesson_id}.json"))
    write_jsonl_atomic(run_dir / "http" / f"{result.lesson_id}.jsonl", exchanges)
    write_plots(result, run_dir)
    write_text_atomic(run_dir / f"{result.lesson_id}.md", lesson_md(result))
    write_json_atomic(run_dir / f"{result.lesson_id}.json", result.to_json())


def keep_failed(run_dir: Path, lesson_id: str, entry: LessonEntry, sink: list[dict]) -> None:
    """A lesson that did not finish: its earlier files go to stale/ (a result is replaced only by a
    successful one), and its exchanges so far are kept in http/<id>.failed.jsonl for diagnosis."""
    try:
        moved = set_aside(run_dir, lesson_id)
        if moved is not None:
            entry.set_aside = str(moved.relative_to(run_dir))
        if sink:
            write_jsonl_atomic(run_dir / "http" / f"{lesson_id}.failed.jsonl", sink)
            entry.failed_exchanges = f"http/{lesson_id}.failed.jsonl"
    except OSError:
        pass  # a full disk is reported by the manifest's save; the lesson's status says what happened
