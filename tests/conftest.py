"""Shared test setup: outputs and server state go to temporary folders, never the repository's."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bytesup.host import load

FIXTURES = Path(__file__).parent / "fixtures"

# Servers the tests start (module fixtures included) run on the embedded engine, whose answers the recorded
# references came from, even where a native build is cached; the tests of the engine choice and of the native
# build itself unset this.
os.environ["BYTESUP_ENGINE"] = "embedded"
# A live run compares the engines before its first lesson (run/engines.py); the tests' runs do not, but for the
# tests of that comparison.
os.environ["BYTESUP_ENGINE_GAP"] = "0"
os.environ["BYTESUP_HARNESS_PROBE"] = "0"  # the run's split of the harness's time: tests/test_harness_split.py
os.environ["BYTESUP_PACE"] = "0"  # the machine's pace around each lesson: tests/test_pace.py

# The tests of Ctrl-C stand as at a terminal. A suite started where SIGINT is ignored (a background job of a shell
# without job control, nohup) would pass that on to every process it starts: Python then installs no handler of its
# own, a child sent SIGINT goes on as if nothing came, and the tests that stop one so fail (one of them, once, left
# its fake server holding port 8431). A child of a process that handles SIGINT starts with the default instead.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Files whose tests use what a process computes once and keeps: check's fits of lesson 8's models (the fixtures'
# full run: test_check_consistency's assembled run and the report's checks fit the same model sets), the plots drawn
# for report.html (the fixtures' full run and the committed ones: the golden replay of the newest run writes the page
# the browser tests open), and numpy's passes over the trained model's four widths (lessons 4 and 8, kept per file's
# sha256). They go to one worker as one unit of work, so that the other worker does not compute the same again (about
# 8 s of fits and drawings in a 2-core run when the pages and the widths were two units).
TOGETHER = dict.fromkeys(("test_browser.py", "test_report.py", "test_check.py", "test_check_groups.py",
                          "test_check_lesson08.py", "test_check_consistency.py", "test_golden.py",
                          "test_lesson_08_capstone_decode_memory_bound.py", "test_lesson_04_next_token.py"), "kept")

# The slowest files, slowest first (CPU seconds in a 2-core run; the set above is the longest unit, a third of the
# suite's time). pyproject.toml has pytest-xdist hand out whole files (`--dist loadfile`), so a module's replay fixture
# runs in one worker only, and in this order, so that no long file starts last while the other worker idles.
SLOWEST_FIRST = ("test_browser.py", "test_golden.py", "test_report.py", "test_check.py", "test_check_groups.py",
                 "test_check_lesson08.py", "test_check_consistency.py", "test_lesson_08_capstone_decode_memory_bound.py",
                 "test_lesson_04_next_token.py", "test_realmodel.py", "test_rpc_integration.py", "test_derive.py",
                 "test_lesson_script.py", "test_engine_faults.py", "test_lesson_06_attention_kv_cache.py",
                 "test_forward_integration.py", "test_runner.py", "test_harness_split.py", "test_run_signals.py",
                 "test_run_lock.py", "test_models.py")


def pytest_collection_modifyitems(items):
    """The files above first, in that order, then the others as collected; a file's tests keep their own order."""
    rank = {name: n for n, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's `--dist loadfile`, with each set of TOGETHER one unit, and the units handed out in the order
    above (xdist would otherwise put the files with the most tests first, whatever their time)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Together(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return TOGETHER.get(Path(file).name, file)

    config.option.loadscopereorder = False
    return Together(config, log)


@pytest.fixture(autouse=True)
def _isolated_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("BYTESUP_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("BYTESUP_SERVER", raising=False)
    monkeypatch.delenv("BYTESUP_API_KEY", raising=False)


@pytest.fixture(autouse=True)
def _quiet_machine(tmp_path, monkeypatch):
    """Lessons run in tests read no load average and no CPU times (as on a platform without them), so a test's
    verdicts never hang on what else this machine runs; the tests of the readings give their own."""
    monkeypatch.setattr(load, "PROC", tmp_path / "no-proc")
    monkeypatch.setattr(load, "load1", lambda: None)


# The run's bandwidth reading (hostbench.run_bandwidth) reads at least 4 × the last-level cache 16 times: on a host
# with a large cache (480 MiB on the 2-core CI machine, a 1,920 MiB working set) a live run spends 5 to 12 s on each of
# its two readings. Tests of something else that run lessons live read the floor's working set (as on a host that
# reports no cache) twice instead: the same code, a smaller reading. SMALL_READING does the same in a child process.
SMALL_READING_SAMPLES = 2
SMALL_READING = ("import bytesup.host.hostbench as h; r = h.run_bandwidth; "
                 f"h.run_bandwidth = lambda threads, llc=None, samples=None: r(threads, {{}}, {SMALL_READING_SAMPLES})")


@pytest.fixture
def small_bandwidth_reading(monkeypatch):
    from bytesup.host import hostbench

    real = hostbench.run_bandwidth
    monkeypatch.setattr(hostbench, "run_bandwidth",
                        lambda threads, llc=None, samples=None: real(threads, {}, SMALL_READING_SAMPLES))


@pytest.fixture
def httpx_mock(httpx_mock, monkeypatch):
    """pytest-httpx's mock, which answers requests sent through httpx's own transport (`httpx.HTTPTransport`): the
    clients' own transport (`KeptAliveTransport`) hands its requests to that one while the mock is in use."""
    import httpx

    from bytesup.llama.transport import KeptAliveTransport

    plain = httpx.HTTPTransport()
    monkeypatch.setattr(KeptAliveTransport, "handle_request", lambda self, request: plain.handle_request(request))
    yield httpx_mock
    plain.close()


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """gguf.GGUFReader parses each file once while this is open: it parses every string of a file's metadata one by
    one (0.13 s for tiny-q8_0's vocabulary, 2 to 4 s for the 49,152 entries of SmolLM2's), and tests of deriving and
    of the real model read the same files many times. A parse is kept by the file's sha256 and its inode, size and
    modification time, so a file that changed (in place or replaced) between two reads is parsed again, and a kept
    reader, whose tensors are a memory map of that inode, always holds the bytes the file holds."""
    import gguf

    from bytesup.files import file_sha256

    parse = gguf.GGUFReader
    parsed: dict[tuple, gguf.GGUFReader] = {}

    def reader(path, mode="r"):
        if mode != "r":
            return parse(path, mode)
        st = os.stat(path)
        key = (file_sha256(Path(path)), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in parsed:
            parsed[key] = parse(path, mode)
        return parsed[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", reader)
        yield
    parsed.clear()


def load_fixture(name: str) -> dict:
    """A response recorded from the real embedded server by scripts/record_fixtures.py.
    A missing fixture fails the test: fixtures are never written by tests."""
    path = FIXTURES / "server" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


# Fixtures of the lesson tests: each test module names its lesson in a module-level LESSON.

@pytest.fixture(scope="module")
def lesson(request):
    """The lesson's module, loaded the way the runner loads it."""
    from bytesup.run.lessons import load_lesson

    return load_lesson(request.module.LESSON)


@pytest.fixture(scope="module")
def _replayed(request, tmp_path_factory):
    from lessonkit import replay

    return replay(request.module.LESSON, tmp_path_factory.mktemp("replay"))


@pytest.fixture
def result(_replayed):
    """The lesson replayed from its recording (checked identical to it); a copy per test, so a
    test that edits it leaves the others alone."""
    return _replayed.model_copy(deep=True)


@pytest.fixture(scope="module")
def exchanges(request):
    from lessonkit import recorded_exchanges

    return recorded_exchanges(request.module.LESSON)
