"""What `bytesup check` reads from a run, by name, as typed records.

Two sources, kept apart on purpose:

- what a lesson *showed*: the facts it stated with `ctx.fact`, read through their models in
  `bytesup.store.facts` (`top_tokens`, `kv_examples`, `sampler_comparisons`); an older run's lesson 4,
  5 and 6 tables became those facts when it was loaded;
- what the server *answered*: the lesson's recorded HTTP exchanges (`<run>/http/<lesson>.jsonl`,
  one JSON object per line with `path`, `request` and `response`), read here without the
  lessons' helpers or `bytesup.llama.responses`, so a number the lesson computed wrongly cannot agree
  with itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from bytesup.check.compare import token_text
from bytesup.store.facts import FactShapeError, lesson04, lesson05, lesson06
from bytesup.store.runs import Run
from bytesup.store.results import LessonResult

__all__ = ["FactShapeError", "ShownToken", "ShownTopTokens", "shown_top_tokens", "kv_rows", "sampler_comparisons",
           "recorded_next_tokens", "recorded_streams", "exchanges_path", "model_hyperparameters", "RawCompletion",
           "recorded_completions"]


# --- lesson 4: the next-token tables as the lesson showed them ---------------------------------

@dataclass(frozen=True)
class ShownToken:
    """One candidate of a next-token table; probabilities are fractions of 1."""
    rank: int
    id: int | None
    token: str                       # the token's text, quotes of its repr removed
    probability: float | None        # the lesson's e^logprob
    logprob: float | None
    server_probability: float | None  # the server's post-sampling probability, None when not listed


@dataclass(frozen=True)
class ShownTopTokens:
    key: str                 # the table's name, e.g. top8_capital_of_france
    prompt: str | None       # None in an older run (its tables do not name their prompt)
    tokens: list[ShownToken]  # by rank


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def shown_top_tokens(result: LessonResult) -> list[ShownTopTokens]:
    """Lesson 4's next-token tables, from its fact `top_tokens` (an older run's tables become that fact when it
    is loaded); FactShapeError when the fact does not have its model's shape."""
    fact = result.stated(lesson04.TopTokens)
    if fact is None:
        return []
    return [ShownTopTokens(key, table.prompt, [
        ShownToken(rank=t.rank, id=t.id, token=token_text(t.token), probability=_finite(t.probability),
                   logprob=_finite(t.logprob), server_probability=_finite(t.server_probability)) for t in table.ranked()])
        for key, table in fact.tables().items()]


# --- lesson 4: the server's answers, from the recorded exchanges -----------------------------

@dataclass(frozen=True)
class RawCandidate:
    id: int
    text: str      # from the token's bytes when the server gave them
    value: float   # a logprob, or a probability for a post-sampling answer


@dataclass(frozen=True)
class RawNextToken:
    """The candidates a recorded /completion answer lists for its first generated position."""
    line: int                     # 1-based line of the exchanges file
    prompt: str | None            # None when the prompt was sent as token ids
    post_sampling: bool           # True: values are the server's probabilities; False: logprobs
    request: dict[str, Any]
    candidates: list[RawCandidate]
    server: str = "main"          # the recording's server label ("f32": lesson 4's server on the f32 width)

    def by_id(self) -> dict[int, RawCandidate]:
        return {c.id: c for c in self.candidates}

    def full_softmax(self) -> bool:
        """Asked at temperature 1 with every cut off (top-k 0, top-p 1, min-p 0), or with the
        temperature sampler alone: its probabilities are the model's own softmax."""
        r = self.request
        if _number(r.get("temperature")) != 1.0:
            return False
        if r.get("samplers") == ["temperature"]:
            return True
        return _number(r.get("top_k")) == 0 and _number(r.get("top_p")) == 1.0 and _number(r.get("min_p")) == 0.0


def _raw_text(candidate: dict[str, Any]) -> str:
    raw = candidate.get("bytes")
    if isinstance(raw, list):
        data = bytes(raw)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return repr(data)
    return str(candidate.get("token", ""))


def exchanges_path(run: Run, result: LessonResult) -> Path | None:
    """The lesson's recorded exchanges: the file its result names, else http/<lesson>.jsonl; None if absent."""
    candidates = [run.path / result.exchanges] if result.exchanges else []
    candidates.append(run.path / "http" / f"{result.lesson_id}.jsonl")
    return next((p for p in candidates if p.is_file()), None)


def recorded_completion_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, the exchange) for every /completion in the exchanges file, read without the client; a
    blank line, a line that is not JSON and an exchange that is not an object are passed over."""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            exchange = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(exchange, dict) and exchange.get("path") == "/completion":
            yield n, exchange


def recorded_next_tokens(path: Path) -> list[RawNextToken]:
    """Every /completion answer in the exchanges file that lists candidates for its first position."""
    found = []
    for n, exchange in recorded_completion_lines(path):
        request, response = exchange.get("request"), exchange.get("response")
        if not isinstance(request, dict) or not isinstance(response, dict):
            continue
        positions = response.get("completion_probabilities")
        if not isinstance(positions, list) or not positions or not isinstance(positions[0], dict):
            continue
        first = positions[0]
        post = isinstance(first.get("top_probs"), list)
        listed = first.get("top_probs") if post else first.get("top_logprobs")
        if not isinstance(listed, list):
            continue
        key = "prob" if post else "logprob"
        cands = [RawCandidate(int(c["id"]), _raw_text(c), float(c[key]))
                 for c in listed if isinstance(c, dict) and isinstance(c.get("id"), int) and _number(c.get(key)) is not None]
        prompt = request.get("prompt")
        found.append(RawNextToken(n, prompt if isinstance(prompt, str) else None, post, request, cands,
                                  str(exchange.get("server", "main"))))
    return found


# --- lesson 5: the sampler comparisons -------------------------------------------------------

SamplerComparison = lesson05.SamplerComparison


def sampler_comparisons(result: LessonResult) -> tuple[list[SamplerComparison], str]:
    """Lesson 5's comparisons with the server, from its fact `sampler_comparisons` (an older run's table becomes
    that fact when it is loaded); FactShapeError when the fact does not have its model's shape."""
    fact = result.stated(lesson05.SamplerComparisons)
    return ([], "") if fact is None else (fact.rows(), "fact sampler_comparisons")


# --- lesson 6: the KV-cache rows ---------------------------------------------------------------

def kv_rows(result: LessonResult) -> list[lesson06.KvExample]:
    """Lesson 6's KV-bytes rows, from its fact `kv_examples` (an older run's tables become that fact when it is
    loaded); FactShapeError when the fact does not have its model's shape."""
    fact = result.stated(lesson06.KvExamples)
    return [] if fact is None else fact.rows()


def model_hyperparameters(result: LessonResult) -> dict[str, Any] | None:
    """The served model's GGUF hyperparameters recorded in the lesson's host values (the first dict
    holding a layer count), or None."""
    stack: list[Any] = [result.host_values]
    while stack:
        value = stack.pop(0)
        if isinstance(value, dict):
            if any(k in value for k in ("n_layer", "block_count", "n_layers")):
                return value
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


# --- streamed answers: the events and their arrival times on the client's clock ----------------

@dataclass(frozen=True)
class RawStream:
    """One streamed /completion as recorded: per event that raised the server's token count,
    (tokens so far, arrival ms); the final event's timings (None when it has none)."""
    line: int
    request: dict[str, Any]
    token_events: list[tuple[int, float]]
    final_ms: float | None
    timings: dict[str, Any] | None

    def gaps(self) -> list[float]:
        times = [at for _, at in self.token_events]
        return [b - a for a, b in zip(times, times[1:], strict=False)]


def _event_data(text: str) -> Any:
    lines = [ln[5:].removeprefix(" ") for ln in text.splitlines() if ln.startswith("data:")]
    if not lines:
        return None
    try:
        return json.loads("\n".join(lines))
    except json.JSONDecodeError:
        return None


def recorded_streams(path: Path) -> list[RawStream]:
    """Every streamed /completion in the exchanges file (lines with `stream`), read without the client."""
    found = []
    for n, exchange in recorded_completion_lines(path):
        if not isinstance(exchange.get("stream"), list):
            continue
        events, so_far, timings, final_ms = [], 0, None, None
        for ev in exchange["stream"]:
            data = _event_data(ev.get("text", "")) if isinstance(ev, dict) else None
            at = _number(ev.get("arrived_ms")) if isinstance(ev, dict) else None
            if not isinstance(data, dict) or at is None:
                continue
            count = data.get("tokens_predicted")
            if isinstance(count, int) and count > so_far:
                events.append((count, at))
                so_far = count
            if data.get("stop") and isinstance(data.get("timings"), dict):
                timings, final_ms = data["timings"], at
        request = exchange.get("request")
        found.append(RawStream(n, request if isinstance(request, dict) else {}, events, final_ms, timings))
    return found


# --- every /completion in order: which server answered, what was asked, the server's timings --------------

@dataclass(frozen=True)
class RawCompletion:
    """One recorded /completion: its line in the exchanges file, the label of the server that answered (`main`: the
    run's server; any other: a server the lesson started), the request body, and the answer's timings (None when
    it has none, as a streamed answer's first events)."""
    line: int
    server: str
    request: dict[str, Any]
    timings: dict[str, Any] | None


def recorded_completions(path: Path) -> list[RawCompletion]:
    """Every /completion of the exchanges file in the order it was made, read without the client: the timings of a
    plain answer, or of a streamed answer's final event."""
    found = []
    for n, exchange in recorded_completion_lines(path):
        request, response, timings = exchange.get("request"), exchange.get("response"), None
        if isinstance(response, dict) and isinstance(response.get("timings"), dict):
            timings = response["timings"]
        elif isinstance(exchange.get("stream"), list):
            for ev in exchange["stream"]:
                data = _event_data(ev.get("text", "")) if isinstance(ev, dict) else None
                if isinstance(data, dict) and data.get("stop") and isinstance(data.get("timings"), dict):
                    timings = data["timings"]
        found.append(RawCompletion(n, str(exchange.get("server", "main")), request if isinstance(request, dict) else {},
                                   timings))
    return found
