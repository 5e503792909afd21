"""lessons/README.md's template is real code: the README shows lessons/_template.py word for word, and the file
runs on hand-made answers with the numbers worked by hand."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

from lessonkit import QueuedServer, hand_context

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
TEMPLATE = LESSONS / "_template.py"


def load_template():
    spec = importlib.util.spec_from_file_location("bytesup_lesson_template", TEMPLATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_the_template_file_word_for_word():
    readme = (LESSONS / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```\n", readme, flags=re.S)
    assert blocks == [TEMPLATE.read_text(encoding="utf-8")]


def test_the_template_is_no_lesson_of_the_course():
    from bytesup.run.lessons import LESSON_FILE

    assert LESSON_FILE.match(TEMPLATE.name) is None


def test_the_template_runs_on_hand_made_answers():
    lesson = load_template()
    listed = [(" mat", 0.5), (" floor", 0.3), (" bed", 0.2)]
    next_token = {"content": " mat", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 1, "predicted_ms": 0.0},
                  "completion_probabilities": [{"id": 5, "token": " mat", "logprob": math.log(0.5), "top_logprobs": [
                      {"id": 5 + i, "token": t, "logprob": math.log(p)} for i, (t, p) in enumerate(listed)]}]}

    def timed(predicted_ms):
        return {"content": "x" * 16, "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": 16, "predicted_ms": predicted_ms}}

    # 16 tokens: 15 decode passes in 150 ms and in 300 ms, 100 and 50 tokens/s
    server = QueuedServer({"/completion": [next_token, timed(150.0), timed(300.0)]})
    result = lesson.main(hand_context("_template", server))
    assert server.left() == {}
    first = server.requests[0][2]
    assert (first["n_probs"], first["temperature"], first["seed"], first["cache_prompt"]) == (8, 0, 42, False)

    table = result.table("top8_template")
    assert [(c.name, c.unit) for c in table.columns] == [("rank", ""), ("token", ""), ("probability", "")]
    assert table.rows == [[1, "' mat'", pytest.approx(0.5)], [2, "' floor'", pytest.approx(0.3)], [3, "' bed'", pytest.approx(0.2)]]
    assert table.notes == ["The likeliest token, ' mat', has 50%."]
    assert result.measurement("decode_tokens_per_s").samples == pytest.approx([100.0, 50.0])
    tokens = result.facts["top_tokens"]["top8_template"]["tokens"]
    assert [(t["rank"], t["id"], t["logprob"]) for t in tokens] == [(1, 5, pytest.approx(math.log(0.5))),
                                                                    (2, 6, pytest.approx(math.log(0.3))),
                                                                    (3, 7, pytest.approx(math.log(0.2)))]
