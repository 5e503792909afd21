"""Server shapes (`bytesup.llama.shapes`): a lesson's own server as one typed record, its flags and its record,
and `ctx.local_server` taking a shape beside the raw flags it took before."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from bytesup.lesson import LessonContext, Reporter
from bytesup.llama import process
from bytesup.llama.shapes import ServerShape
from bytesup.options import RunOptions
from bytesup.store.results import LessonResult
from bytesup.store.runs import ReplaySource


def test_a_shape_gives_the_servers_flags_and_its_record():
    shape = ServerShape.per_slot(Path("/m/smollm2.gguf"), 4, 512, ("--spec-type", "ngram-simple"))
    assert (shape.context, shape.context_per_slot) == (2048, 512)
    assert shape.argv() == ["-c", "2048", "--parallel", "4", "--spec-type", "ngram-simple"]
    assert shape.to_json() == {"model": "smollm2.gguf", "slots": 4, "context": 2048,
                               "extra": ["--spec-type", "ngram-simple"], "native": False}
    assert shape.text() == "4 slots, context 2,048 (512 per slot), --spec-type ngram-simple"
    one = ServerShape(None, 1, 256, native=True)
    assert one.argv() == ["-c", "256", "--parallel", "1"] and one.text() == "1 slot, context 256, native build"
    # What the lessons pass today as raw flags, as shapes: the same flags.
    assert ServerShape(None, 1, 256).argv() == ["-c", "256", "--parallel", "1"]  # lesson 4's F32_SERVER


@pytest.mark.parametrize(("slots", "context", "extra", "match"), [
    (0, 256, (), "at least one slot"),
    (4, 2, (), "cannot be shared by 4 slots"),
    (1, 256, ("-np", "2"), "--parallel belong"),
    (1, 256, ("--ctx-size=512",), "--ctx-size belong"),
    (1, 256, ("-m", "other.gguf", "--port", "1"), "--model, --port belong"),
])
def test_a_shape_that_contradicts_itself_is_refused(slots, context, extra, match):
    with pytest.raises(ValueError, match=match):
        ServerShape(None, slots, context, extra)


@pytest.fixture
def started(monkeypatch):
    seen = {}

    def start_server(model, flags, die_with_parent, native, answer_s, stop_check):
        seen.update(model=model, flags=flags, native=native)
        return types.SimpleNamespace(url="http://127.0.0.1:9")

    monkeypatch.setattr(process, "start_server", start_server)
    monkeypatch.setattr(process, "stop_server", lambda port: True)
    return seen


def context(replay: ReplaySource | None = None) -> LessonContext:
    return LessonContext("t", "t", server=None, run=RunOptions(command=["t"]), model_path=None, sink=[],  # type: ignore[arg-type]
                         replay=replay, progress=Reporter(None, "t"))


def test_local_server_takes_a_shape_and_records_it(started):
    ctx = context()
    shape = ServerShape(Path("/m/a.gguf"), 2, 1024, native=True)
    with ctx.local_server("parallel-2", shape):
        pass
    assert started["model"] == Path("/m/a.gguf") and started["native"] is True
    assert started["flags"][-4:] == ["-c", "1024", "--parallel", "2"]
    assert ctx.host_values["server_shape_parallel-2"] == shape.to_json() == ctx.server_shapes["parallel-2"]
    with pytest.raises(TypeError, match="ServerShape alone"):
        with ctx.local_server("x", shape, ["-c", "1"]):
            pass


def test_local_server_still_takes_a_model_and_raw_flags_and_records_no_shape(started):
    ctx = context()
    with ctx.local_server("f32", Path("/m/f32.gguf"), ["-c", "256", "--parallel", "1"]):
        pass
    assert started["flags"][-4:] == ["-c", "256", "--parallel", "1"] and started["native"] is False
    assert ctx.host_values == {} and ctx.server_shapes == {}


def test_a_replay_records_a_shape_only_where_the_recorded_run_did(started):
    shape = ServerShape(None, 1, 256)
    old = context(ReplaySource(result=LessonResult(lesson_id="t", title="t", started_at="s", finished_at="f"), exchanges=[]))
    with old.local_server("f32", shape):
        pass
    assert old.host_values == {} and old.server_shapes == {"f32": shape.to_json()} and started == {}
    recorded = {"server_shape_f32": ServerShape(Path("/there/m.gguf"), 1, 256).to_json()}
    new = context(ReplaySource(result=LessonResult(lesson_id="t", title="t", started_at="s", finished_at="f",
                                                   host_values=recorded), exchanges=[]))
    with new.local_server("f32", shape):
        pass
    assert new.host_values == recorded
