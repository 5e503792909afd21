"""Mutation benchmark: how many small changes to the arithmetic the fast tests catch (`make mutants`).

Not part of `make test` (it runs the tests once per mutant: minutes to an hour on 2 cores).

    .venv/bin/python scripts/mutants.py                       # the shared modules and every lesson
    .venv/bin/python scripts/mutants.py src/bytesup/course/memory_bound.py  # one module, its default tests
    .venv/bin/python scripts/mutants.py lessons/08_capstone_decode_memory_bound.py
    .venv/bin/python scripts/mutants.py lessons/04_next_token.py=tests/test_lesson_04_next_token.py,tests/test_check.py

A target is a source file, optionally `=` a comma-separated list of test files to run against its
mutants. Without a list: `src/bytesup/NAME.py` runs tests/test_NAME.py (see TESTS below for the
modules that need more), `lessons/0N_name.py` runs tests/test_lesson_0N_name.py. Tests marked
`integration` (they start servers) are never run.

A lesson is mutated only in its computation section (the lines under each `# --- computation`
header, up to the next `# --- ` header or the script's `if __name__ == "__main__":`): the requests and the
rendering are left as they are.
mutmut is given a unified diff that adds exactly those lines (`--use-patch-file`, which mutates
only added lines); the diff is written into the copy, the lesson file itself is not touched.

The tool is mutmut 2.5.1 (with its `patch` extra, whatthepatch), installed into the running venv on first use (not a test dependency).
It mutates files in place, which suits the lessons (loaded by file path, not importable), so each
target works on its own copy of the tree in .mutants/<target>/ (git-ignored): the worktree's own
files are never mutated, even when a run is interrupted, and --jobs N runs N targets at once.
Results are cached in each copy's .mutmut-cache: a mutant once killed stays killed; survivors are
tested again when any test file changes. --fresh starts over.

Prints, per target and in total, mutants killed / total and the share, and lists the survivors as
diffs. Killed counts mutants the tests failed on, including those that timed out (an endless loop
is caught) and mutmut's "suspicious" ones (failed, but slowly). --min 0.8 exits 1 when a target's
share is below 80%.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutants"
MUTMUT = "2.5.1"

SHARED_TARGETS = ["src/bytesup/course/formulas.py", "src/bytesup/llama/timed.py", "src/bytesup/llama/responses.py",
                  "src/bytesup/course/sampling.py", "src/bytesup/host/hostbench.py", "src/bytesup/course/memory_bound.py"]
DEFAULT_TARGETS = [*SHARED_TARGETS, "src/bytesup/course/ceiling.py", "src/bytesup/models/forward.py",
                   "src/bytesup/course/decodetime.py", "src/bytesup/course/depthtime.py", "src/bytesup/course/robust.py",
                   "src/bytesup/course/loop.py",
                   "src/bytesup/course/samplercheck.py", "src/bytesup/course/speculative.py",
                   "src/bytesup/course/clientclock.py", "src/bytesup/course/nexttoken.py", "src/bytesup/course/kvcache.py",
                   "src/bytesup/course/busy.py", "src/bytesup/store/facts/lesson07.py", "src/bytesup/store/facts/lesson08.py",
                   # the lessons that still hold a computation section (the others' arithmetic is in the package)
                   *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "lessons").glob("0*.py")
                           if re.search(r"^# --- computation\b", p.read_text(encoding="utf-8"), re.M))]
# Test files per module, where tests/test_NAME.py (tests/test_lesson_STEM.py) alone is not the right set.
TESTS: dict[str, list[str]] = {
    "lessons/05_generating_text.py": ["tests/test_lesson_05_generating_text.py", "tests/test_sampling.py"],
    "lessons/05b_speculative_decoding.py": ["tests/test_lesson_05b_speculative_decoding.py", "tests/test_speculative.py"],
    "src/bytesup/course/samplercheck.py": ["tests/test_lesson_05_generating_text.py", "tests/test_sampling.py"],
    "src/bytesup/course/speculative.py": ["tests/test_speculative.py", "tests/test_lesson_05b_speculative_decoding.py"],
    # The arithmetic lessons 4, 6 and 8 moved out of their files, with the tests that check it by hand.
    "src/bytesup/course/nexttoken.py": ["tests/test_nexttoken.py", "tests/test_lesson_04_next_token.py"],
    "src/bytesup/course/kvcache.py": ["tests/test_kvcache.py", "tests/test_lesson_06_attention_kv_cache.py"],
    "src/bytesup/store/facts/lesson08.py": ["tests/test_lesson08.py", "tests/test_lesson_08_capstone_decode_memory_bound.py"],
    "src/bytesup/store/facts/lesson07.py": ["tests/test_lesson_07_hardware_fit.py"],
}
SECTION = re.compile(r"^(# --- |if __name__ == )")  # a section ends at the next header, or at the script's entry
COMPUTATION = re.compile(r"^# --- computation\b")

KILLED_STATUSES = ("ok_killed", "bad_timeout", "ok_suspicious")


@dataclass
class Tally:
    target: str
    statuses: dict[str, int] = field(default_factory=dict)
    survivors: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def killed(self) -> int:
        return sum(self.statuses.get(s, 0) for s in KILLED_STATUSES)

    @property
    def share(self) -> float:
        return self.killed / self.total if self.total else float("nan")


def parse_target(text: str) -> tuple[str, list[str]]:
    """'path[=test,test]' -> (path, tests), with the default tests when none are named."""
    path, _, tests = text.partition("=")
    path = os.path.normpath(path)
    if tests:
        return path, [t for t in tests.split(",") if t]
    stem = Path(path).stem
    if path in TESTS:
        return path, TESTS[path]
    if is_lesson(path):
        return path, [f"tests/test_lesson_{stem}.py"]
    return path, [f"tests/test_{stem}.py"]


def ensure_mutmut() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        if version("mutmut") == MUTMUT and version("whatthepatch"):
            return
    except PackageNotFoundError:
        pass
    print(f"installing mutmut[patch]=={MUTMUT} into {sys.prefix} (not a test dependency)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"mutmut[patch]=={MUTMUT}"], check=True)


def is_lesson(path: str) -> bool:
    return Path(path).parent.name == "lessons"


def computation_lines(source: str) -> list[int]:
    """The 1-based numbers of the lines in a lesson's computation sections (each header included)."""
    lines, inside = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        if SECTION.match(line):
            inside = bool(COMPUTATION.match(line))
        if inside:
            lines.append(number)
    return lines


def computation_patch(path: str, source: str) -> str:
    """A unified diff that adds exactly the computation lines of `source` (a lesson at `path`)."""
    text = source.splitlines()
    numbers = computation_lines(source)
    if not numbers:
        raise SystemExit(f"{path}: no '# --- computation' section header")
    out = [f"--- a/{path}", f"+++ b/{path}"]
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    added = 0  # lines already added above: the old file's line numbers lag the new file's by this
    for run in runs:
        out.append(f"@@ -{run[0] - 1 - added},0 +{run[0]},{len(run)} @@")
        out.extend("+" + text[n - 1] for n in run)
        added += len(run)
    return "\n".join(out) + "\n"


def work_dir(path: str) -> Path:
    return WORK / re.sub(r"[^A-Za-z0-9_.-]", "_", path)


def sync_copy(work: Path, fresh: bool) -> None:
    """The worktree's files (tracked and untracked, not ignored) copied into `work`; its cache kept unless fresh."""
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, dst = ROOT / name, work / name
        if not src.is_file():
            continue  # deleted in the worktree but still tracked
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.is_file() or dst.read_bytes() != src.read_bytes():
            shutil.copy2(src, dst)
    for leftover in list(work.rglob("*.py.bak")):  # an interrupted run's backup: the copy above restored the file
        leftover.unlink()
    for cache in list(work.rglob("__pycache__")):  # mutants of equal size must never meet a stale .pyc
        shutil.rmtree(cache, ignore_errors=True)
    models = work / "models"
    if (ROOT / "models").is_dir() and not models.exists():
        models.symlink_to(ROOT / "models")


RUNNING: set[subprocess.Popen] = set()
STOPPING = threading.Event()


def run_target(path: str, tests: list[str], fresh: bool) -> int:
    work = work_dir(path)
    sync_copy(work, fresh)
    missing = [p for p in [path, *tests] if not (work / p).is_file()]
    if missing:
        raise SystemExit(f"not found in the worktree: {', '.join(missing)}")
    # Each mutant starts pytest afresh: leave out what these tests do not use (pytest-httpx's plugin,
    # assertion rewriting, the cache), so that the start costs little. mutmut 2 counts any exit
    # status but 1 as "tests passed", and pytest exits 2 when a mutant breaks the import: the
    # tests run through this script's --pytest, which exits 1 for any failure.
    uses_httpx_mock = any("httpx_mock" in (work / t).read_text(encoding="utf-8") for t in tests)
    runner = " ".join([shlex.quote(sys.executable), "-B", shlex.quote(str(work / "scripts" / "mutants.py")), "--pytest",
                       "-x", "-q", "-p", "no:cacheprovider", *([] if uses_httpx_mock else ["-p", "no:pytest_httpx"]),
                       "--assert=plain", "-m", shlex.quote("not integration"), *map(shlex.quote, tests)])
    forget_survivors_if_the_runner_changed(work, runner)
    env = {**os.environ, "PYTHONPATH": str(work / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "mutmut", "run", "--paths-to-mutate", path, "--tests-dir", "tests",
           "--runner", runner, "--no-progress", "--simple-output"]
    if is_lesson(path):
        patch = work / "computation.patch"
        patch.write_text(computation_patch(path, (work / path).read_text(encoding="utf-8")))
        cmd += ["--use-patch-file", str(patch)]
    log = work / "mutmut.log"
    print(f"mutating {path} against {' '.join(tests)} (log: {log.relative_to(ROOT)})", flush=True)
    code = run_mutmut(cmd, work, env, log)
    # mutmut 2 now and then leaves a survivor of an earlier run untested (its test hash stays old):
    # those are run one by one, as `mutmut run ID` always tests the mutant it is given.
    for mutant_id in stale_survivors(work, path):
        run_mutmut([*cmd[:4], str(mutant_id), *cmd[4:]], work, env, log, append=True)
    print(f"done: {path}", flush=True)
    return code


def run_mutmut(cmd: list[str], work: Path, env: dict[str, str], log: Path, append: bool = False) -> int:
    with log.open("a" if append else "w") as out:
        if STOPPING.is_set():
            raise SystemExit("stopped")
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        RUNNING.add(proc)
        try:
            code = proc.wait()
        finally:
            RUNNING.discard(proc)
    if STOPPING.is_set():
        raise SystemExit("stopped")
    if code < 0 or code & 1:  # killed, or mutmut's "fatal error" bit, e.g. the tests failing without any mutant
        print(log.read_text()[-3000:])
        raise SystemExit(f"mutmut failed in {work} (exit {code}); log: {log}")
    return code


def in_scope(path: str) -> set[int] | None:
    """The 0-based line numbers (as mutmut's cache counts) that a target's figures cover; None: every line."""
    if not is_lesson(path):
        return None
    copy = work_dir(path) / path
    source = (copy if copy.is_file() else ROOT / path).read_text(encoding="utf-8")
    return {n - 1 for n in computation_lines(source)}


def cached_mutants(work: Path, path: str) -> list[tuple[int, str, str]]:
    """(id, status, tested_against_hash) of the target's mutants in the copy's cache, in scope only."""
    db = sqlite3.connect(work / ".mutmut-cache")
    rows = db.execute(
        "SELECT m.id, m.status, m.tested_against_hash, l.line_number FROM Mutant m JOIN Line l ON m.line = l.id "
        "JOIN SourceFile f ON l.sourcefile = f.id WHERE f.filename = ? ORDER BY m.id", (path,)).fetchall()
    db.close()
    scope = in_scope(path)
    return [(i, status, tested) for i, status, tested, line in rows if scope is None or line in scope]


def stale_survivors(work: Path, path: str) -> list[int]:
    db = sqlite3.connect(work / ".mutmut-cache")
    (current,) = db.execute("SELECT value FROM MiscData WHERE key = 'hash_of_tests'").fetchone() or ("",)
    db.close()
    return [i for i, status, tested in cached_mutants(work, path) if status != "ok_killed" and tested != current]


def forget_survivors_if_the_runner_changed(work: Path, runner: str) -> None:
    """mutmut re-tests its survivors only when a test file changes; a changed command must re-test them too."""
    stamp, cache = work / "runner.txt", work / ".mutmut-cache"
    if cache.is_file() and (not stamp.is_file() or stamp.read_text() != runner):
        db = sqlite3.connect(cache)
        db.execute("UPDATE Mutant SET tested_against_hash = '' WHERE status != 'ok_killed'")
        db.commit()
        db.close()
    stamp.write_text(runner)


def stop_running(*_: object) -> None:
    """Stop the mutmut runs this script started (each leads its own process group) and exit."""
    STOPPING.set()
    for proc in list(RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    raise SystemExit("stopped; the worktree's files were never mutated, and the next run starts from fresh copies")


def tally(path: str) -> Tally:
    t = Tally(path)
    cache = work_dir(path) / ".mutmut-cache"
    if not cache.is_file():
        return t
    for mutant_id, status, _ in cached_mutants(cache.parent, path):
        t.statuses[status] = t.statuses.get(status, 0) + 1
        if status == "bad_survived":
            t.survivors.append(mutant_id)
    return t


def show(path: str, mutant_id: int) -> str:
    """The mutant's diff against the worktree's file, from the cache alone.

    Not `mutmut show`: that first renumbers the cache's lines from the file on disk, which in a copy
    being mutated holds a mutant, and the run then fails to find its lines.
    """
    from mutmut import RelativeMutationID
    from mutmut.cache import _get_unified_diff

    db = sqlite3.connect(work_dir(path) / ".mutmut-cache")
    line, index, line_number = db.execute(
        "SELECT l.line, m.\"index\", l.line_number FROM Mutant m JOIN Line l ON m.line = l.id WHERE m.id = ?",
        (mutant_id,)).fetchone()
    db.close()
    source = (ROOT / path).read_text(encoding="utf-8")
    diff = _get_unified_diff(source, path, RelativeMutationID(line, index, line_number), [], update_cache=False)
    lines = [ln for ln in diff.splitlines() if ln and not ln.startswith(("---", "+++"))]
    return "\n".join(lines) or f"(line {line_number + 1} changed in the worktree since: {line.strip()})"


def run_pytest(args: list[str]) -> int:
    """The tests of one mutant: 0 when they pass, 1 for any failure (a failed import included)."""
    import pytest

    return 0 if pytest.main(args) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--pytest"]:
        return run_pytest(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*",
                    help="source[=test,test] (default: the six shared modules, course/ceiling.py and every lesson)")
    ap.add_argument("--fresh", action="store_true", help="forget earlier results")
    ap.add_argument("--report-only", action="store_true", help="print the cached results without running")
    ap.add_argument("--jobs", type=int, default=1, help="targets mutated at once (each in its own copy)")
    ap.add_argument("--min", type=float, default=None, help="exit 1 when a target's killed share is below this")
    args = ap.parse_args(argv)

    targets = [parse_target(t) for t in (args.targets or DEFAULT_TARGETS)]
    if not args.report_only:
        ensure_mutmut()
        signal.signal(signal.SIGTERM, stop_running)
        signal.signal(signal.SIGINT, stop_running)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for done in [pool.submit(run_target, path, tests, args.fresh) for path, tests in targets]:
                done.result()

    tallies = [tally(path) for path, _ in targets]
    width = max(len(t.target) for t in tallies)
    print()
    for t in tallies:
        if t.survivors:
            print(f"== survivors in {t.target} ({len(t.survivors)}) ==")
            for mutant_id in t.survivors:
                print(f"-- mutant {mutant_id}\n{show(t.target, mutant_id)}")
            print()
    print(f"{'target':<{width}}  killed / total   share  (timeouts, suspicious, skipped, untested)")
    for t in tallies:
        extra = ", ".join(str(t.statuses.get(s, 0)) for s in ("bad_timeout", "ok_suspicious", "skipped", "untested"))
        print(f"{t.target:<{width}}  {t.killed:>6} / {t.total:<5}  {t.share:6.1%}  ({extra})")
    killed, total = sum(t.killed for t in tallies), sum(t.total for t in tallies)
    print(f"{'total':<{width}}  {killed:>6} / {total:<5}  {killed / total if total else float('nan'):6.1%}")
    if args.min is not None and any(not t.share >= args.min for t in tallies):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
