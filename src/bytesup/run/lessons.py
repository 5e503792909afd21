"""The course's lessons: found in lessons/ (or $BYTESUP_LESSONS) as NN_name.py (or NNx_name.py, a lesson after lesson NN), loaded by id."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from bytesup.errors import BytesupError
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


class UnknownLesson(BytesupError):
    exit_code = 2

    def __init__(self, lesson_id: str, valid: list[str]):
        super().__init__(
            f"There is no lesson {lesson_id!r}. Valid lesson ids: {', '.join(valid) or '(none found)'}. "
            "`bytesup lessons` lists them with titles."
        )
