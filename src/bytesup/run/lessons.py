"""The course's lessons: found in lessons/ (or $BYTESUP_LESSONS) as NN_name.py (or NNx_name.py, a lesson after
lesson NN), loaded by id, with the options each declares (`Options`, a LessonOptions) gathered for the command line
and checked before a run."""

from __future__ import annotations

import importlib.util
import re
import sys
import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic.fields import FieldInfo

from bytesup.errors import BytesupError
from bytesup.options import LessonOptions, OptionError, RunOptions
from bytesup.paths import lessons_dir

# A lesson file is NN_name.py, or NNx_name.py for a lesson that follows lesson NN (05b_… after 05_…):
# sorted by name, 05_ comes before 05b_, which comes before 06_.
LESSON_FILE = re.compile(r"^(\d\d[a-z]?)_[a-z0-9_]+\.py$")


def discover_lessons() -> dict[str, Path]:
    """{lesson id: file}, in lesson order."""
    folder = lessons_dir()
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.iterdir()) if LESSON_FILE.match(p.name)}


def load_lesson(lesson_id: str) -> ModuleType:
    lessons = discover_lessons()
    if lesson_id not in lessons:
        raise UnknownLesson(lesson_id, list(lessons))
    spec = importlib.util.spec_from_file_location(f"bytesup_lesson_{lesson_id}", lessons[lesson_id])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would be: dataclasses look their module up by name.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def lesson_title(module: ModuleType) -> str:
    """The lesson's TITLE, else the first line of its docstring."""
    return getattr(module, "TITLE", None) or (module.__doc__ or "").strip().splitlines()[0]


def times_the_server(module: ModuleType) -> bool:
    """Whether the lesson times anything on a server: its TIMES_THE_SERVER, True where it does not say. A run reads the
    machine's pace around such lessons alone (bytesup.run.pace)."""
    return bool(getattr(module, "TIMES_THE_SERVER", True))


class UnknownLesson(BytesupError):
    exit_code = 2

    def __init__(self, lesson_id: str, valid: list[str]):
        super().__init__(
            f"There is no lesson {lesson_id!r}. Valid lesson ids: {', '.join(valid) or '(none found)'}. "
            "`bytesup lessons` lists them with titles."
        )


# --- the options lessons declare ---------------------------------------------------------------------------

def options_of(module: ModuleType) -> type[LessonOptions]:
    """The lesson's own options: its `Options` class (a lesson without one takes no option)."""
    declared = getattr(module, "Options", LessonOptions)
    if not (isinstance(declared, type) and issubclass(declared, LessonOptions)):
        raise BytesupError(f"{module.__file__} declares Options that is not a subclass of bytesup.options.LessonOptions. "
                           "Declare the lesson's options as `class Options(LessonOptions)` with one field per option.")
    return declared


@dataclass(frozen=True)
class OptionField:
    """One lesson option of the course: its field, its flag, and the lessons that take it."""

    name: str
    flag: str
    info: FieldInfo
    repeatable: bool
    lessons: tuple[str, ...]

    def help(self) -> str:
        numbers = [lid.split("_")[0].lstrip("0") for lid in self.lessons]  # 04_next_token: 4, 05b_…: 5b
        which = numbers[0] if len(numbers) == 1 else f"{', '.join(numbers[:-1])} and {numbers[-1]}"
        return f"{self.info.description} (lesson{'s' if len(numbers) > 1 else ''} {which})"


def option_fields(modules: dict[str, ModuleType]) -> dict[str, OptionField]:
    """Every option the lessons `modules` declare, by field name, with the lessons that take it. Lessons that take
    one option declare it alike (one type, one help, one flag): it is declared once, in bytesup.options."""
    found: dict[str, OptionField] = {}
    for lid, module in modules.items():
        declared = options_of(module)
        for name, info in declared.model_fields.items():
            mine = OptionField(name, declared.flag(name), info, bool(declared.extra(name).get("repeatable")), (lid,))
            seen = found.get(name)
            if seen is None:
                found[name] = mine
            elif (seen.flag, seen.info.annotation, seen.info.description) != (mine.flag, info.annotation, info.description):
                raise BytesupError(f"Lessons {seen.lessons[0]} and {lid} both declare the option {name!r}, but differently. "
                                   "Declare it once in bytesup.options (as BandwidthGbs is) and name it in both lessons' Options.")
            else:
                found[name] = replace(seen, lessons=(*seen.lessons, lid))
    return found


def course_options() -> dict[str, OptionField]:
    """The options every lesson of the course declares: the lesson flags of `bytesup run` and `bytesup run-all`."""
    return option_fields({lid: load_lesson(lid) for lid in discover_lessons()})


def check_lesson_options(lesson_ids: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """The lesson options given (by field name), validated by the Options of every lesson in `lesson_ids` that
    takes them, as the manifest records them. A bad value, or an option none of these lessons takes, is an
    OptionError: the run stops before it starts."""
    modules = {lid: load_lesson(lid) for lid in lesson_ids}
    checked: dict[str, Any] = {}
    for module in modules.values():
        declared = options_of(module)
        checked.update(declared.parse({k: v for k, v in given.items() if k in declared.model_fields}).given())
    idle = [name for name, value in given.items() if value is not None and name not in checked]
    if idle:
        everywhere = course_options()
        parts = []
        for name in idle:
            known = everywhere.get(name)
            flag = known.flag if known else f"--{name.replace('_', '-')}"
            parts.append(f"{flag} is an option of {', '.join(known.lessons)}" if known else f"{flag} is no lesson's option")
        raise OptionError(f"{'; '.join(parts)}, and this run does not run that lesson ({', '.join(lesson_ids) or 'no lesson'}). "
                          "Drop the option, or add the lesson that takes it (`bytesup run --help` says which lesson takes what).")
    return checked


def with_checked_options(lesson_ids: list[str], options: RunOptions) -> RunOptions:
    """`options` with its lesson options validated, once, by the Options of the lessons `lesson_ids`: the same record
    when that was done already (the command line does it before anything else), else a new one with the values as
    `check_lesson_options` gives them. A bad value is an OptionError before the run starts."""
    if options.lessons_checked == tuple(lesson_ids):
        return options
    return dataclasses.replace(options, lesson_options=check_lesson_options(lesson_ids, options.lesson_options),
                               lessons_checked=tuple(lesson_ids))
