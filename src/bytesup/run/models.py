"""Models made first: every model a live run will need is made (built, fetched or derived: `catalog.ensure_model`)
before its first lesson, with a progress bar and a one-line summary, so that making a model is never lesson time
and a run never sits silent inside a lesson while a model is made.

The models are the run's own server's (when the run starts one) and those each lesson to run declares with a
module-level `models_needed(query)` (a `lesson.ModelQuery`: the served model, whether the server is on this
host, --repeat and the lesson's own options), read without running the lesson; a model the lesson's options
leave out is not declared, so not made. Each is made once, whoever asks. A replay makes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn

from bytesup.errors import BytesupError
from bytesup.host import environment
from bytesup.lesson import ModelQuery
from bytesup.llama.placement import is_loopback
from bytesup.models import catalog
from bytesup.models import smollm2
from bytesup.options import RunOptions
from bytesup.run.lessons import load_lesson, options_of
from bytesup.store.manifest import ModelsMade


def is_local(url: str) -> bool:
    """Whether a server URL is on this host (where the lessons start servers of their own), as a lesson decides it."""
    host = urlparse(url).hostname or ""
    return is_loopback(host) or host in environment.own_addresses()


def query_for(options: RunOptions, served: Path | None, local: bool) -> ModelQuery:
    """The query every lesson's declaration reads, before its own options are set in it."""
    readable = served if served is not None and served.is_file() else None
    sha = environment.file_digest(readable)["sha256"] if readable is not None else None
    return ModelQuery(served=readable, served_sha256=sha, local=local, repeat=max(1, options.repeat), options=None)


def lesson_models(lesson_ids: list[str], options: RunOptions, query: ModelQuery) -> list[str]:
    """The catalog's models the lessons declare (`models_needed`), in lesson order, each once; a lesson without a
    declaration needs none beyond the served model."""
    names: list[str] = []
    for lid in lesson_ids:
        module = load_lesson(lid)
        declare = getattr(module, "models_needed", None)
        if declare is None:
            continue
        kind = options_of(module)
        given = {k: v for k in kind.model_fields if (v := options.lesson_options.get(k)) is not None}
        try:
            names += declare(replace(query, options=kind.parse(given)))
        except Exception:  # noqa: BLE001 - a faulty declaration leaves its models to the lesson, never stops the run
            continue
    return unique(names)


def unique(names: list[str]) -> list[str]:
    """Each name once, in order, the default model's shipped width first (the other widths are derived from it)."""
    found = list(dict.fromkeys(n for n in names if n in catalog.model_names()))
    return sorted(found, key=lambda n: n != smollm2.SOURCE)


@dataclass
class Made:
    """What making the models did: the path of each, the names made now, the seconds spent, what failed."""

    paths: dict[str, Path] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)
    seconds: float = 0.0
    failed: dict[str, str] = field(default_factory=dict)

    def record(self) -> ModelsMade:
        return ModelsMade(models=list(self.paths) + list(self.failed), made=self.made, seconds=round(self.seconds, 1),
                          failed=dict(self.failed) or None)


def summary(made: Made) -> str:
    """`models ready: 6 (2 made now in 41.2 s, 4 already there)`, and any that could not be made."""
    n = len(made.paths)
    there = n - len(made.made)
    if not made.made:
        line = f"models ready: {n} (already there)" if n else "models ready: none needed"
    else:
        line = (f"models ready: {n} ({len(made.made)} made now in {made.seconds:.1f} s"
                + (f", {there} already there)" if there else ")"))
    if made.failed:
        line += "; not made: " + "; ".join(f"{k} ({v})" for k, v in made.failed.items()) + \
                " (the lessons that ask for them try again)"
    return line


def make_models(names: list[str], console: Console, made: Made | None = None, required: str | None = None) -> Made:
    """Make each model of `names` that is missing, one progress bar each; `required` (the run's own server's
    model) stops the run when it cannot be made, any other is noted and left to the lessons that ask for it."""
    made = made if made is not None else Made()
    todo = [n for n in names if n not in made.paths and n not in made.failed]
    missing = [n for n in todo if not catalog.default_model_path(n).is_file()]
    order = [*made.paths, *todo]
    for name in todo:
        if name not in missing:
            made.paths[name] = catalog.default_model_path(name)
    if missing:
        _make(missing, console, made, required)
    made.paths = {n: made.paths[n] for n in order if n in made.paths}  # in the order asked
    return made


def _make(missing: list[str], console: Console, made: Made, required: str | None) -> None:
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        for name in missing:
            task = progress.add_task(escape(f"making model {name}"), total=1.0)

            def report(message: str, fraction: float, task=task) -> None:
                progress.update(task, completed=max(0.0, min(1.0, fraction)), description=escape(f"making {message}"))

            began = time.monotonic()
            try:
                made.paths[name] = catalog.ensure_model(name, progress=report)
                made.made.append(name)
            except BytesupError as exc:
                if name == required:
                    raise
                made.failed[name] = str(exc)[:200]
            finally:
                made.seconds += time.monotonic() - began
                progress.remove_task(task)


def models_first(options: RunOptions, lesson_ids: list[str], console: Console, served: Path | str | None,
                 local: bool) -> Made:
    """Make every model the run will need, before its first lesson: `served` first when it is a model's name (the
    run's own server's, which must be made), then those the lessons declare for that served model; then print
    the one-line summary."""
    made = Made()
    required = served if isinstance(served, str) else None
    if required is not None:
        make_models([required], console, made, required=required)
    path = made.paths.get(required) if required is not None else served
    assert not isinstance(path, str)
    make_models(lesson_models(lesson_ids, options, query_for(options, path, local)), console, made)
    console.print(escape(summary(made)), highlight=False)
    return made
