"""bytesup.llama.timed on hand-made answers (QueuedServer): what it asks the server, and the speeds it
makes of the timings, against numbers worked by hand."""

from __future__ import annotations

import math

import httpx
import pytest

from bytesup.llama import timed
from bytesup.llama.client import LlamaServer
from bytesup.errors import BytesupError

from lessonkit import QueuedServer


def completion(prompt_n=10, prompt_ms=50.0, predicted_n=5, predicted_ms=80.0, content="x"):
    return {"content": content, "timings": {"prompt_n": prompt_n, "prompt_ms": prompt_ms,
                                            "predicted_n": predicted_n, "predicted_ms": predicted_ms}}


def test_pinned_settings():
    assert timed.PINNED == {"temperature": 0, "seed": 42, "cache_prompt": False, "ignore_eos": True}


def test_corpus_text_is_the_carried_file():
    text = timed.corpus_text()
    assert len(text) > 10_000 and text == text.strip("\x00")


def test_long_prompt_sends_a_prefix_of_eight_characters_per_token(monkeypatch):
    text = "abcdefghij" * 100  # 1000 characters
    monkeypatch.setattr(timed, "corpus_text", lambda: text)
    q = QueuedServer({"/tokenize": [{"tokens": [5, 6, 7, 8]}]})
    assert timed.long_prompt_tokens(q.server, 3) == [5, 6, 7]
    # 3 tokens × 8 characters = the first 24 characters, ids only
    assert q.requests == [("POST", "/tokenize", {"content": text[:24], "with_pieces": False, "add_special": False})]


def test_long_prompt_exactly_enough_tokens_asks_once(monkeypatch):
    text = "abcdefghij" * 100
    monkeypatch.setattr(timed, "corpus_text", lambda: text)
    q = QueuedServer({"/tokenize": [{"tokens": [1, 2, 3]}]})  # a second request would find no answer
    assert timed.long_prompt_tokens(q.server, 3) == [1, 2, 3]
    assert q.left() == {}


def test_long_prompt_falls_back_to_the_whole_text(monkeypatch):
    text = "abcdefghij" * 100
    monkeypatch.setattr(timed, "corpus_text", lambda: text)
    q = QueuedServer({"/tokenize": [{"tokens": [1, 2]}, {"tokens": [9, 8, 7, 6, 5, 4]}]})
    # the 40-character prefix gave 2 < 5 tokens and 40 < 1000: the whole text is tokenized
    assert timed.long_prompt_tokens(q.server, 5) == [9, 8, 7, 6, 5]
    assert [body for _, _, body in q.requests] == [{"content": text[:40], "with_pieces": False, "add_special": False},
                                                   {"content": text, "with_pieces": False, "add_special": False}]


def test_long_prompt_falls_back_only_when_the_text_is_longer_than_the_prefix(monkeypatch):
    # 5 tokens ask for 40 characters. A text of exactly 40: the prefix was the whole text, no second request
    monkeypatch.setattr(timed, "corpus_text", lambda: "x" * 40)
    q = QueuedServer({"/tokenize": [{"tokens": [1, 2]}]})
    assert timed.long_prompt_tokens(q.server, 5) == [1, 2, 1, 2, 1]
    # a text of 41 characters: one more than the prefix, so the whole text is asked for
    monkeypatch.setattr(timed, "corpus_text", lambda: "x" * 41)
    q = QueuedServer({"/tokenize": [{"tokens": [1, 2]}, {"tokens": [3, 4, 5]}]})
    assert timed.long_prompt_tokens(q.server, 5) == [3, 4, 5, 3, 4]
    assert q.left() == {}


def test_long_prompt_repeats_a_short_text(monkeypatch):
    text = "abcdefghij" * 10  # 100 characters: 20 tokens × 8 = 160 > 100, no second request
    monkeypatch.setattr(timed, "corpus_text", lambda: text)
    q = QueuedServer({"/tokenize": [{"tokens": [1, 2, 3, 4, 5, 6, 7]}]})
    # 7 ids doubled to 14, then 28; the first 20
    assert timed.long_prompt_tokens(q.server, 20) == [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6]
    assert q.requests[0][2]["content"] == text


def test_long_prompt_of_no_tokens_is_refused(monkeypatch):
    monkeypatch.setattr(timed, "corpus_text", lambda: "abc")
    q = QueuedServer({"/tokenize": [{"tokens": []}]})
    with pytest.raises(ValueError, match="^the server tokenized the corpus into no tokens$"):
        timed.long_prompt_tokens(q.server, 4)


def test_timed_completions_pin_the_settings_and_repeat():
    q = QueuedServer({"/completion": [completion(), completion(), completion()]})
    seen = []

    def track(rounds):
        seen.append(list(rounds))
        return rounds

    done = timed.timed_completions(q.server, [1, 2], 7, 3, track=track, top_k=5, seed=7)
    assert len(done) == 3 and seen == [[0, 1, 2]]
    body = {"prompt": [1, 2], "temperature": 0, "seed": 7, "cache_prompt": False, "ignore_eos": True,
            "top_k": 5, "n_predict": 7}
    assert [r[2] for r in q.requests] == [body] * 3
    # without a progress wrapper, the same requests
    q2 = QueuedServer({"/completion": [completion(), completion()]})
    assert len(timed.timed_completions(q2.server, "hi", 4, 2)) == 2
    assert q2.requests[0][2] == {"prompt": "hi", **timed.PINNED, "n_predict": 4}
    assert q2.left() == {}


def test_speed_samples_from_timings():
    q = QueuedServer({"/completion": [completion(10, 50.0, 5, 80.0), completion(300, 1500.0, 17, 320.0)]})
    done = timed.timed_completions(q.server, "p", 5, 2)
    # prefill: 10 tokens in 50 ms = 200 tokens/s; 300 in 1500 ms = 200 tokens/s
    assert timed.prefill_samples(done) == [200.0, 200.0]
    # decode: (5 − 1) passes in 80 ms = 20 ms each = 50 tokens/s; (17 − 1) in 320 ms = 20 ms = 50 tokens/s
    assert timed.decode_samples(done) == pytest.approx([50.0, 50.0])
    q = QueuedServer({"/completion": [completion(8, 16.0, 3, 30.0)]})
    one = timed.timed_completions(q.server, "p", 3, 1)
    assert timed.prefill_samples(one) == [500.0]  # 8 × 1000 ÷ 16
    assert timed.decode_samples(one) == [pytest.approx(2000 / 30)]  # 2 passes in 30 ms: 1000 ÷ 15


def test_context_size_from_props():
    q = QueuedServer({"/props": [{"default_generation_settings": {"n_ctx": "4096"}}]})
    got = timed.context_size(q.server)
    assert got == 4096 and isinstance(got, int)
    assert q.left() == {}


def test_context_size_from_the_first_slot():
    q = QueuedServer({"/props": [{"default_generation_settings": {}}], "/slots": [[{"n_ctx": 2048}, {"n_ctx": 1}]]})
    assert timed.context_size(q.server) == 2048
    q = QueuedServer({"/props": [{}], "/slots": [[{"n_ctx": 512}]]})
    assert timed.context_size(q.server) == 512


def test_context_size_unknown_is_an_error_that_says_why():
    q = QueuedServer({"/props": [{}], "/slots": [[]]})
    with pytest.raises(BytesupError) as err:
        timed.context_size(q.server)
    assert str(err.value) == ("The server at http://queued.invalid reports no context size in /props or /slots, so prompts "
                              "cannot be sized to fit. Check that it is a llama.cpp llama-server with /props enabled.")

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json={"build_info": "b1"})
        return httpx.Response(501, json={"error": "slots endpoint disabled"})

    server = LlamaServer("http://nowhere.invalid", transport=httpx.MockTransport(handle))
    with pytest.raises(BytesupError, match="http://nowhere.invalid reports no context size"):
        timed.context_size(server)


def test_concurrent_completions_keep_the_order_of_the_bodies():
    def echo(body):
        return completion(content=str(body["n_predict"]))

    q = QueuedServer({"/completion": [echo, echo, echo]})
    bodies = [{"n_predict": 3}, {"n_predict": 1}, {"n_predict": 2}]
    done, wall = timed.concurrent_completions(q.server, "p", bodies)
    assert [d.content for d in done] == ["3", "1", "2"]
    assert sorted(r[2]["n_predict"] for r in q.requests) == [1, 2, 3]
    assert all(r[2]["prompt"] == "p" for r in q.requests)
    assert 0 <= wall < 60 and not math.isnan(wall)
    done, wall = timed.concurrent_completions(q.server, "p", [])
    assert done == [] and 0 <= wall < 60
