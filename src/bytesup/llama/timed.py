"""Timed requests shared by the lessons: repeated completions whose raw timings become speeds.

Settings are pinned so that repeats measure the same work:
- temperature 0 and a fixed seed: the same tokens every time;
- cache_prompt false: every repeat prefills the whole prompt (no reuse of the previous one);
- ignore_eos: a model may not stop early, so n_predict tokens are always decoded.
"""

from __future__ import annotations

from typing import Any

from bytesup.llama.client import LlamaServer
from bytesup.errors import BytesupError
from bytesup.paths import data_dir
from bytesup.llama.responses import Completion, StreamedCompletion, decode_tokens_per_s, prefill_tokens_per_s
from bytesup.units import PINNED



def corpus_text() -> str:
    """The text the repository carries (also the tokenizer's training text)."""
    return (data_dir() / "corpus.txt").read_text(encoding="utf-8")


def long_prompt_tokens(server: LlamaServer, n_tokens: int) -> list[int]:
    """Exactly `n_tokens` token ids of the carried text, tokenized by the served model."""
    text = corpus_text()
    # A prefix is enough for most prompts (English runs 3-5 characters per token): sending less
    # keeps the recorded exchanges small. Fall back to the whole text when the prefix falls short.
    ids = server.tokenize(text[: n_tokens * 8], with_pieces=False).ids
    if len(ids) < n_tokens and n_tokens * 8 < len(text):
        ids = server.tokenize(text, with_pieces=False).ids
    if not ids:
        raise ValueError("the server tokenized the corpus into no tokens")
    while len(ids) < n_tokens:
        ids = ids + ids
    return ids[:n_tokens]


def timed_completions(server: LlamaServer, prompt: str | list[int], n_predict: int, repeat: int,
                      track=None, **settings: Any) -> list[Completion]:
    """`repeat` identical completions; `track` is an optional progress wrapper over the repeats."""
    body = {**PINNED, **settings, "n_predict": n_predict}
    rounds = range(repeat) if track is None else track(range(repeat))
    return [server.completion(prompt, **body) for _ in rounds]


def streamed_completions(server: LlamaServer, prompt: str | list[int], n_predict: int, repeat: int,
                         track=None, **settings: Any) -> list[StreamedCompletion]:
    """`repeat` identical streamed completions (the same pinned settings), each event timed on arrival."""
    body = {**PINNED, **settings, "n_predict": n_predict}
    rounds = range(repeat) if track is None else track(range(repeat))
    return [server.completion_stream(prompt, **body) for _ in rounds]


def prefill_samples(completions: list[Completion]) -> list[float]:
    return [prefill_tokens_per_s(c.timings) for c in completions]


def decode_samples(completions: list[Completion]) -> list[float]:
    return [decode_tokens_per_s(c.timings) for c in completions]


def context_size(server: LlamaServer) -> int:
    """Tokens of context one request may use: /props' generation settings, else the first slot."""
    n_ctx = (server.props().default_generation_settings or {}).get("n_ctx")
    if not n_ctx:
        try:
            slots = server.slots()
        except BytesupError:  # /slots may be switched off; the message below says what matters
            slots = None
        n_ctx = slots[0].get("n_ctx") if slots else None
    if not n_ctx:
        raise BytesupError(
            f"The server at {server.base_url} reports no context size in /props or /slots, so prompts "
            "cannot be sized to fit. Check that it is a llama.cpp llama-server with /props enabled."
        )
    return int(n_ctx)


def concurrent_completions(server: LlamaServer, prompt: str | list[int], bodies: list[dict[str, Any]]) -> tuple[list[Completion], float]:
    """One request per body, all sent at once (one thread each); returns them and the wall time in seconds.

    The wall time is a host measurement: lessons pass it through ctx.host so a replay is exact.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    if server.settle is not None:  # once for the batch: its threads do not wait (see `host.quiet`)
        server.settle()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(bodies))) as pool:
        done = list(pool.map(lambda body: server.completion(prompt, **body), bodies))
    return done, time.perf_counter() - started
