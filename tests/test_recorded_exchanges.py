"""A lesson run live against pytest-httpx serving its recorded exchanges (strict: every recorded
answer must be asked for, and nothing else), so the lesson's requests and the recording agree."""

from __future__ import annotations

import json

from bytesup.store.results import load_result
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from lessonkit import recorded, recorded_model

URL = "http://127.0.0.1:8099"
LESSON = "02_tokens_and_embeddings"


def test_lesson_asks_exactly_the_recorded_requests(httpx_mock, tmp_path):
    source = recorded(LESSON)
    manifest = json.loads((source / "manifest.json").read_text(encoding="utf-8"))
    for line in (source / "http" / f"{LESSON}.jsonl").read_text(encoding="utf-8").splitlines():
        e = json.loads(line)
        httpx_mock.add_response(method=e["method"], url=URL + e["path"], status_code=e["status"], json=e["response"],
                                match_json=e["request"] if e["method"] == "POST" else None)
    # The runner's own looks at the server, at the start and before and after the lesson: the manifest's snapshots,
    # registered last, so that each recorded answer is handed out first and these only once those are used.
    httpx_mock.add_response(method="GET", url=f"{URL}/health", json={"status": "ok"}, is_reusable=True)
    httpx_mock.add_response(method="GET", url=f"{URL}/props", json=manifest["engine"]["props"], is_reusable=True)
    httpx_mock.add_response(method="GET", url=f"{URL}/v1/models", json=manifest["engine"]["v1_models"], is_reusable=True)
    out = tmp_path / "live"
    # Every model is the same bytes everywhere, so the GGUF read here is the recorded one.
    assert run_lessons([LESSON], RunOptions(server_url=URL, model=recorded_model(LESSON), out=out)) == 0
    live = load_result(json.loads((out / f"{LESSON}.json").read_text(encoding="utf-8")), LESSON)
    kept = load_result(json.loads((source / f"{LESSON}.json").read_text(encoding="utf-8")), LESSON)
    assert [t.model_dump() for t in live.tables] == [t.model_dump() for t in kept.tables]
