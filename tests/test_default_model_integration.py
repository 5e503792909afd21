"""The real default model on the real embedded engine: lesson 4's next-token requests, live, against
the project's own reference (references/smollm2-135m-q4_1_cpu.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bytesup.llama import process
from bytesup.llama.client import LlamaServer
from bytesup.models.catalog import DEFAULT_MODEL, ensure_model, file_sha256
from bytesup.llama.responses import shown_token
from bytesup.run.lessons import load_lesson

REFERENCE = Path(__file__).resolve().parents[1] / "references" / "smollm2-135m-q4_1_cpu.json"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server():
    model = ensure_model(DEFAULT_MODEL)
    port = process.free_port()
    started = process.start_server(model, ["--port", str(port), "-t", "2"])
    try:
        with LlamaServer(started.url, timeout=120) as client:
            yield client, model
    finally:
        process.stop_server(port)


def test_lesson_4_top_tokens_match_the_default_models_reference(server):
    client, model = server
    lesson = load_lesson("04_next_token")
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert ref["scope"]["model"]["sha256"] == file_sha256(model)
    figures = {f["id"]: f for f in ref["figures"]}
    tables = {name: prompt for name, prompt in lesson.PROMPTS}
    for fig in figures.values():
        if not fig["id"].endswith("_top_token"):
            continue
        short = fig["id"].removesuffix("_top_token")
        table = fig.get("key") or fig["table"]   # a figure addresses the fact top_tokens by its table's name
        done = client.completion(tables[table], **lesson.TOP8)
        cands = sorted(done.first_position().top_logprobs, key=lambda c: -c["logprob"])
        tokens = [c["token"] for c in cands]
        assert tokens[0] == fig["published"], (table, tokens)
        top_pct = 100 * math.exp(cands[0]["logprob"])
        prob = figures[f"{short}_top_probability"]
        assert abs(top_pct - prob["published"]) <= prob["tolerance"]["absolute"], (table, top_pct)
        want = figures[f"{short}_top8"]
        absent = [t for t in want["published"] if t not in tokens[:8]]
        assert len(absent) <= want["tolerance"]["missing"], (table, absent)
    # The first of them, spelled out: a trained model is confident about Paris.
    paris = client.completion("The capital of France is", **lesson.TOP8)
    assert shown_token(paris.first_position().token, paris.first_position().bytes) == "' Paris'"
