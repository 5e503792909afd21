"""The numpy forward pass against the real embedded engine, live: the tiny preset and the default
model's f32 width, on lesson 4's prompts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bytesup.llama import process
from bytesup.models import forward
from bytesup.run.lessons import load_lesson
from bytesup.llama.client import LlamaServer
from bytesup.models.catalog import ensure_model

pytestmark = pytest.mark.integration


def served(model_name: str):
    model = ensure_model(model_name)
    port = process.free_port()
    started = process.start_server(model, ["--port", str(port), "-t", "2", "-c", "256"])
    return model, port, LlamaServer(started.url, timeout=120)


def compare(model_name: str) -> list[tuple[int, int, float, int]]:
    """Per prompt: (numpy's top id, the server's, the largest |Δp| over the server's eight, ids both list)."""
    lesson = load_lesson("04_next_token")
    model, port, client = served(model_name)
    try:
        prompts = [p for _, p in lesson.PROMPTS]
        ids = [client.tokenize(p, with_pieces=False, add_special=True).ids for p in prompts]
        answers = [client.completion(p, **lesson.TOP8).first_position().top_logprobs or [] for p in prompts]
    finally:
        client.close()
        process.stop_server(port)
    out = []
    for done, listed in zip(forward.forward(forward.Model(model), ids), answers, strict=True):
        ours = set(int(i) for i in np.argsort(-done.probs)[:8])
        best = max(listed, key=lambda c: c["logprob"])
        gap = max(abs(float(done.probs[c["id"]]) - math.exp(c["logprob"])) for c in listed)
        out.append((int(np.argmax(done.probs)), best["id"], gap, len(ours & {c["id"] for c in listed})))
    return out


def test_the_default_models_f32_width_against_the_server():
    # float32 activations on both sides: the same top token and top eight, every probability within 2e-3.
    for ours, theirs, gap, shared in compare("smollm2-135m-f32"):
        assert ours == theirs and shared == 8 and gap < 2e-3


def test_the_tiny_preset_against_the_server():
    # Q8_0 weights, so the engine rounds the activations to 8 bits as well; on these random weights that moved
    # the listed probabilities by at most 5.9e-6 (seen on the four prompts). 1e-4 leaves room for another CPU.
    for ours, theirs, gap, shared in compare("tiny-q8_0"):
        assert ours == theirs and shared == 8 and gap < 1e-4
