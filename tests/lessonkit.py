"""Replaying a lesson from its recorded fixture run, for the lessons' tests.

Fixture runs live in tests/fixtures/runs/<lesson_id>/ and are recorded from the real embedded
engine by scripts/record_lesson_fixtures.sh (never written by a test).
"""

from __future__ import annotations

import json
from pathlib import Path

from bytesup.store.results import LessonResult, load_result
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

FIXTURE_RUNS = Path(__file__).parent / "fixtures" / "runs"


def recorded(lesson_id: str) -> Path:
    folder = FIXTURE_RUNS / lesson_id
    if not (folder / f"{lesson_id}.json").is_file():
        raise FileNotFoundError(f"no recorded run for {lesson_id}: run scripts/record_lesson_fixtures.sh {lesson_id}")
    return folder


def recorded_model(lesson_id: str) -> Path:
    """The model the lesson was recorded on, fetched or built here (every model's bytes are the same everywhere)."""
    from bytesup.models.catalog import ensure_model

    manifest = json.loads((recorded(lesson_id) / "manifest.json").read_text(encoding="utf-8"))
    return ensure_model(Path(manifest["model"]["path"]).stem)


def replay(lesson_id: str, tmp_path: Path) -> LessonResult:
    """Replay the lesson from its recording; the regenerated JSON and Markdown must equal the recorded ones."""
    source = recorded(lesson_id)
    out = tmp_path / f"replay-{lesson_id}"
    code = run_lessons([lesson_id], RunOptions(replay=source, out=out, command=["test"]))
    assert code == 0, (out / "manifest.json").read_text()
    for name in (f"{lesson_id}.json", f"{lesson_id}.md"):
        assert (out / name).read_text(encoding="utf-8") == (source / name).read_text(encoding="utf-8"), name
    return load_result(json.loads((out / f"{lesson_id}.json").read_text(encoding="utf-8")), lesson_id)


def recorded_exchanges(lesson_id: str) -> list[dict]:
    """Every HTTP exchange of the lesson's recorded run, in order."""
    from bytesup.files import read_jsonl

    return read_jsonl(recorded(lesson_id) / "http" / f"{lesson_id}.jsonl")


def run_bandwidth(lesson_id: str, result: LessonResult) -> dict:
    """The bandwidth reading the recorded lesson used: the run's one reading in its manifest
    (`host_bandwidth.before`), or, for a run recorded before readings were shared, its own."""
    manifest = json.loads((recorded(lesson_id) / "manifest.json").read_text(encoding="utf-8"))
    before = (manifest.get("host_bandwidth") or {}).get("before")
    return before if before is not None else result.host_values["read_bandwidth"]


# --- hand-made answers ------------------------------------------------------------------------

class QueuedServer:
    """A LlamaServer whose answers are queued by hand, per (method, path), like `llm`'s MockModel.

    `answers["/completion"]` is a list of JSON bodies handed out in order (a callable gets the
    request JSON and returns the body); `requests` keeps what the lesson sent. A path with no
    answer left fails the test with the path named, so a lesson that asks for more than the test
    expects is caught."""

    def __init__(self, answers: dict[str, list]):
        import httpx

        from bytesup.llama.client import LlamaServer

        self.answers = {path: list(bodies) for path, bodies in answers.items()}
        self.requests: list[tuple[str, str, object]] = []

        def handle(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content) if request.content else None
            self.requests.append((request.method, request.url.path, body))
            queue = self.answers.get(request.url.path)
            if not queue:
                raise AssertionError(f"no queued answer left for {request.method} {request.url.path}")
            answer = queue.pop(0)
            answer = answer(body) if callable(answer) else answer
            if isinstance(answer, str):
                return httpx.Response(200, text=answer)
            return httpx.Response(200, json=answer)

        self.server = LlamaServer("http://queued.invalid", transport=httpx.MockTransport(handle))

    def left(self) -> dict[str, int]:
        """Answers not asked for, per path (empty when the lesson used every one)."""
        return {path: len(queue) for path, queue in self.answers.items() if queue}


def hand_context(lesson_id: str, server, *, host_values: dict | None = None, bandwidth: dict | None = None,
                 model_path: Path | None = None, identity: dict | None = None, lesson_options: dict | None = None):
    """A LessonContext over hand-made answers: `host_values` answer ctx.host(...) (a value not given
    fails with ReplayMiss naming it), `bandwidth` is the run's bandwidth reading (`host_bandwidth.before`)."""
    from bytesup.store.results import LessonResult
    from bytesup.lesson import LessonContext, Reporter, RunShared
    from bytesup.options import LessonOptions, RunOptions
    from bytesup.run.lessons import discover_lessons, load_lesson, options_of
    from bytesup.store.manifest import HostBandwidth, Manifest
    from bytesup.store.runs import ReplaySource

    values = {"repeat": 2, **(host_values or {})}
    recorded = LessonResult(lesson_id=lesson_id, title="hand-made", started_at="2026-01-01T00:00:00+00:00",
                            finished_at="2026-01-01T00:00:01+00:00", host_values=values)
    shared = RunShared(Manifest(), replay_manifest=Manifest(host_bandwidth=HostBandwidth(before=bandwidth)), replaying=True)
    ctx = LessonContext(lesson_id, "hand-made", server=getattr(server, "server", server),
                        run=RunOptions(command=["test"], lesson_options=lesson_options or {}),
                        options_type=options_of(load_lesson(lesson_id)) if lesson_id in discover_lessons() else LessonOptions,
                        model_path=model_path, sink=[], replay=ReplaySource(result=recorded, exchanges=[]),
                        progress=Reporter(None, lesson_id), shared=shared)
    ctx.identity = identity or {}
    return ctx
