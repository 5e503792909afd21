"""The lesson API (`bytesup.lesson.LessonContext`): how many samples a lesson takes, live and replayed."""

from __future__ import annotations

import pytest

from bytesup.lesson import LessonContext, Reporter
from bytesup.options import RunOptions
from bytesup.store.results import LessonResult
from bytesup.store.runs import ReplaySource


def live(repeat: int) -> LessonContext:
    return LessonContext("t", "t", server=None, run=RunOptions(command=["t"], repeat=repeat), model_path=None,  # type: ignore[arg-type]
                         sink=[], replay=None, progress=Reporter(None, "t"))


def replaying(host_values: dict, repeat: int = 3) -> LessonContext:
    recorded = LessonResult(lesson_id="t", title="t", started_at="s", finished_at="f", host_values=host_values)
    return LessonContext("t", "t", server=None, run=RunOptions(command=["t"], repeat=repeat), model_path=None,  # type: ignore[arg-type]
                         sink=[], replay=ReplaySource(result=recorded, exchanges=[]), progress=Reporter(None, "t"))


@pytest.mark.parametrize(("repeat", "minimum", "expected"), [(3, 5, 5), (7, 5, 7), (1, 1, 1), (5, 5, 5), (2, 3, 3)])
def test_samples_are_the_runs_repeat_and_at_least_the_lessons_minimum(repeat, minimum, expected):
    ctx = live(repeat)
    assert ctx.samples(minimum) == expected
    assert ctx.host_values == {"repeat": repeat, "samples": expected}  # both recorded for the replay


def test_a_replay_asks_the_recorded_number_whatever_the_run_and_the_minimum_say_now():
    assert replaying({"repeat": 3, "samples": 4}, repeat=9).samples(5) == 4
    # A run recorded before the lesson asked: the rule on its recorded --repeat, and nothing new is recorded.
    old = replaying({"repeat": 3}, repeat=9)
    assert old.samples(5) == 5 and old.samples(2, name="turns") == 3
    assert "samples" not in old.host_values and "turns" not in old.host_values


def test_each_rule_has_its_own_name_and_a_minimum_of_at_least_one():
    ctx = live(3)
    assert ctx.samples(5) == 5 and ctx.samples(5) == 5 and ctx.samples(1, name="warmups") == 3
    with pytest.raises(ValueError, match="give each rule its own name"):
        ctx.samples(2)
    with pytest.raises(ValueError, match="at least one sample"):
        ctx.samples(0, name="none")


def test_the_repeat_setter_changes_the_lesson_only():
    options = RunOptions(command=["t"], repeat=3)
    ctx = LessonContext("t", "t", server=None, run=options, model_path=None, sink=[], replay=None,  # type: ignore[arg-type]
                        progress=Reporter(None, "t"))
    ctx.repeat = 6
    assert (ctx.repeat, ctx.host_values["repeat"], options.repeat) == (6, 6, 3)
    assert ctx.samples(2) == 6


def test_repeat_means_one_thing_and_its_help_says_it():
    import dataclasses

    repeat = next(f for f in dataclasses.fields(RunOptions) if f.name == "repeat")
    shown = repeat.metadata["cli"]["help"]
    assert "samples of each timed measurement" in shown and "the minimum its statistics need" in shown
