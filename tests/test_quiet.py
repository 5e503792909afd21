"""`host.quiet`: a timed request waits until no other thread of the process runs, and only the main thread waits.

The thread states are read from a folder laid out as /proc/self/task (one `stat` file per thread), here made by
hand, and once from the real /proc with a thread that spins."""

from __future__ import annotations

import gc
import sys
import threading
import time
import weakref
from pathlib import Path

import httpx
import pytest

from bytesup.host import quiet
from bytesup.llama.client import LlamaServer
from bytesup.llama.recording import ReplayTransport
from bytesup.llama.timed import concurrent_completions
from bytesup.options import RunOptions
from bytesup.run import harness, runner
from conftest import load_fixture

URL = "http://127.0.0.1:8431"


def tasks(folder: Path, states: dict[int, str]) -> Path:
    """A /proc/self/task of threads in `states`, each named with a space and brackets as a thread may be."""
    for tid, letter in states.items():
        (folder / str(tid)).mkdir(exist_ok=True)
        (folder / str(tid) / "stat").write_text(f"{tid} (numpy (w) {tid}) {letter} 1 2 3 4 5\n")
    return folder


def test_a_state_is_the_field_after_the_last_bracket(tmp_path):
    found = tasks(tmp_path, {7: "R", 8: "S"})
    assert quiet.state(7, found) == "R" and quiet.state(8, found) == "S"
    assert quiet.state(9, found) is None  # a thread that has gone


def test_the_others_leave_out_the_caller_and_names_that_are_not_threads(tmp_path):
    found = tasks(tmp_path, {7: "R", 8: "S", 9: "S"})
    (tmp_path / "self").mkdir()
    assert sorted(quiet.others(found, me=8)) == [7, 9]


def test_only_running_threads_are_running(tmp_path):
    found = tasks(tmp_path, {7: "R", 8: "S", 9: "D", 10: "R"})
    assert quiet.running([7, 8, 9, 10, 11], found) == [7, 10]


def test_a_quiet_process_waits_for_nothing(tmp_path):
    found = tasks(tmp_path, {7: "S", 8: "S"})
    assert quiet.settle(limit_s=5.0, tasks=found) < 1.0


def test_a_thread_that_keeps_running_is_waited_for_up_to_the_limit(tmp_path):
    found = tasks(tmp_path, {7: "R"})
    waited = quiet.settle(limit_s=0.05, step_s=0.001, tasks=found)
    assert 0.05 <= waited < 5.0


def test_the_wait_ends_when_the_thread_stops_running(tmp_path):
    """The thread stops running 0.05 s after the timer starts: settle returns only after that (its own clock starts a
    little after the timer's, so it may count a little less than 0.05 s), and long before its limit."""
    found = tasks(tmp_path, {7: "R", 8: "S"})
    stopped: list[float] = []

    def stop() -> None:
        stopped.append(time.monotonic())
        tasks(tmp_path, {7: "S"})
    timer = threading.Timer(0.05, stop)
    timer.start()
    try:
        waited = quiet.settle(limit_s=30.0, step_s=0.001, tasks=found)
        returned = time.monotonic()
    finally:
        timer.join()
    assert stopped and returned >= stopped[0]
    assert 0.03 <= waited < 30.0
    assert quiet.settle(limit_s=30.0, tasks=found) < 1.0


def test_only_the_main_thread_waits(tmp_path):
    found = tasks(tmp_path, {7: "R"})
    waited = []
    worker = threading.Thread(target=lambda: waited.append(quiet.settle(limit_s=30.0, tasks=found)))
    worker.start()
    worker.join()
    assert waited == [0.0]


def test_without_proc_nothing_waits(tmp_path):
    assert quiet.settle(limit_s=30.0, tasks=tmp_path / "absent") == 0.0


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc on this system")
def test_a_spinning_thread_of_this_process_is_seen_in_proc():
    stop = threading.Event()
    spinning = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the spinning thread gives the interpreter back often
    spinning.start()
    try:
        time.sleep(0.01)
        assert spinning.native_id in quiet.running(quiet.others())
        assert quiet.settle(limit_s=0.1) >= 0.1
    finally:
        stop.set()
        spinning.join()
        sys.setswitchinterval(old)
    assert quiet.settle(limit_s=30.0) < 1.0  # numpy's threads, if any spin, stop within about 0.1 s


# --- the client waits before each completion, a replay never -------------------------------------------------

def recorded(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=load_fixture("completion_decode")["response"])


def test_a_completion_settles_before_it_is_sent():
    events: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        events.append("sent")
        return recorded(request)

    server = LlamaServer(URL, transport=httpx.MockTransport(answer))
    assert server.settle is quiet.settle
    server.settle = lambda: events.append("settled") or 0.0
    server.completion("x", n_predict=16)
    assert events == ["settled", "sent"]


def test_a_replayed_client_does_not_settle():
    assert LlamaServer(URL, transport=ReplayTransport([])).settle is None


def test_a_batch_settles_once_before_its_threads_start():
    events: list[tuple[str, bool]] = []
    main = threading.main_thread()

    def answer(request: httpx.Request) -> httpx.Response:
        events.append(("sent", threading.current_thread() is main))
        return recorded(request)

    server = LlamaServer(URL, transport=httpx.MockTransport(answer))
    server.settle = lambda: events.append(("settled", threading.current_thread() is main)) or 0.0
    done, _ = concurrent_completions(server, "x", [{"n_predict": 16}] * 3)
    assert len(done) == 3
    # The batch's own settle comes first, from the main thread; each thread's completion calls it too, where the
    # real settle returns at once (test_only_the_main_thread_waits).
    assert events[0] == ("settled", True)
    assert sum(1 for what, on_main in events if what == "settled" and on_main) == 1
    assert sorted(what for what, on_main in events if not on_main).count("sent") == 3


def test_the_harness_settles_outside_its_clock():
    events: list[str] = []
    server = LlamaServer(URL, transport=httpx.MockTransport(
        lambda request: events.append(f"sent, settle {server.settle}") or recorded(request)))
    mine = server.settle = lambda: events.append("settled") or 0.0
    harness.outside_ms(server, {"n_predict": 16})
    assert events == ["settled", "sent, settle None"]  # the completion itself did not settle again
    assert server.settle is mine  # and the client's wait is back for the next request


# --- the cycle collector: collected and frozen before each lesson ----------------------------------------------------

class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_freezing_collects_the_cycles_first_and_sets_the_rest_aside():
    garbage, kept = _Node(), _Node()
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_freeze_count()
    try:
        quiet.freeze_heap()
        assert gone() is None  # collected, not frozen
        assert gc.get_freeze_count() > before
        assert not any(o is kept for o in gc.get_objects(generation=2))  # set aside: no collection walks it
    finally:
        quiet.thaw_heap()
    assert gc.get_freeze_count() == 0
    assert any(o is kept for o in gc.get_objects(generation=2))


def test_a_run_freezes_before_each_lesson_and_thaws_at_its_end(tmp_path, monkeypatch):
    frozen: list[int] = []
    real = quiet.freeze_heap
    monkeypatch.setattr(quiet, "freeze_heap", lambda: (frozen.append(1), real()))
    source = Path(__file__).parent / "fixtures" / "runs" / "02_tokens_and_embeddings"
    assert runner.run_lessons(["02_tokens_and_embeddings"], RunOptions(replay=source, out=tmp_path / "r", command=["t"])) == 0
    assert frozen == [1] and gc.get_freeze_count() == 0
