"""One pydantic model per llama-server response, fields spelled as the server spells them.

`extra="allow"` keeps whatever a newer server adds. The fields lessons rely on are required,
so a response without one fails with the field's name (see `parse`).
Speeds are derived from raw timings in one place: `prefill_tokens_per_s` and `decode_tokens_per_s`.
"""

from __future__ import annotations

import math
import re
from math import exp
from operator import itemgetter
from typing import Annotated, Any, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import NotRequired, TypedDict

from bytesup.course.loop import decode_ms_per_token
from bytesup.errors import ImplausibleValue, MalformedResponse, MissingField

# Values a llama.cpp server can send, checked as each answer is read: a log-probability is finite and at most 0
# (1e-6 above it for rounding of a probability of 1), a probability lies in [0, 1], a time is finite and not
# negative, a count is not negative. Anything else is named, never computed with.
ROUNDING = 1e-6
LogProb = Annotated[float, Field(le=ROUNDING, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0.0, le=1.0 + ROUNDING, allow_inf_nan=False)]
Millis = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
TokenId = Annotated[int, Field(ge=0)]
Byte = Annotated[int, Field(ge=0, le=255)]  # a token's bytes, where the server lists them as numbers
MIN_TOP_PROBABILITY = 2.0 ** -32
# Listed candidates are some of one distribution: their probabilities add up to at most 1 (float32 rounding aside).
SUM_TOLERANCE = 1e-3


class ServerRecord(BaseModel):
    model_config = ConfigDict(extra="allow")


class Health(ServerRecord):
    status: str


class Props(ServerRecord):
    build_info: str | None = None
    model_path: str | None = None
    total_slots: int | None = None
    default_generation_settings: dict[str, Any] | None = None


class TokenPiece(ServerRecord):
    id: TokenId
    # Pieces that are not valid UTF-8 arrive as a list of byte values: kept as they came.
    piece: str | list[Byte]

    @property
    def piece_bytes(self) -> bytes:
        return bytes(self.piece) if isinstance(self.piece, list) else self.piece.encode("utf-8")


class Tokenized(ServerRecord):
    tokens: list[TokenPiece] | list[TokenId]

    @property
    def ids(self) -> list[int]:
        return [t.id if isinstance(t, TokenPiece) else t for t in self.tokens]


class Detokenized(ServerRecord):
    content: str


# A listed candidate is read from every position of an answer with n_probs (8 of them at each of 32 positions is 256
# in one answer), so each is the server's dict checked by pydantic-core as a TypedDict, and read by key: c["logprob"].
# Keys the project does not read are left out of it (the recording keeps the answer as it came). On a 2-core AMD EPYC
# (2026-12-06), the client's parse of an n_probs 8 answer (scripts/bench_answer_path.py, its parse column) took 347 µs
# of CPU this way, where a dict subclass per candidate read by attribute, keeping every key, took 424 µs.
@with_config(ConfigDict(extra="ignore"))  # not the allow of the record that holds it
class TopLogprob(TypedDict):
    id: TokenId
    token: str
    bytes: NotRequired[list[Byte] | None]
    logprob: LogProb


@with_config(ConfigDict(extra="ignore"))
class TopProb(TypedDict):
    id: TokenId
    token: str
    bytes: NotRequired[list[Byte] | None]
    prob: Probability


_ID, _LOGPROB, _PROB = itemgetter("id"), itemgetter("logprob"), itemgetter("prob")


def _a_distribution(listed: str, values: list[float]) -> None:
    """Listed candidates' probabilities as some of one distribution gives them: the best at least 2^-32, all of them
    adding up to at most 1 (float32 rounding aside); else the reason, for the position that lists them."""
    if max(values) < MIN_TOP_PROBABILITY:
        raise PydanticCustomError(
            "implausible", "every candidate of {listed} has a probability below 2^-32, the least the most "
            "likely token of any vocabulary has", {"listed": listed})
    total = sum(values)
    if total > 1.0 + SUM_TOLERANCE:
        raise PydanticCustomError("implausible", "the probabilities of {listed} add up to {total}, more than 1",
                                  {"listed": listed, "total": f"{total:.6g}"})


class TokenProbabilities(ServerRecord):
    """One generated position. Two shapes: full softmax (`post_sampling_probs: false`)
    gives logprob/top_logprobs; after the sampler chain (`true`) gives prob/top_probs."""

    id: TokenId
    token: str
    bytes: list[Byte] | None = None
    logprob: LogProb | None = None
    top_logprobs: list[TopLogprob] | None = None
    prob: Probability | None = None
    top_probs: list[TopProb] | None = None

    @model_validator(mode="after")
    def _a_top_candidate(self) -> "TokenProbabilities":
        # The most likely of a vocabulary's tokens has a probability of at least 1 / its size (under 2^32 tokens),
        # so a list whose best logprob lies below -ln 2^32 came from no softmax: its probabilities would all be 0.
        # (Read for every position of every answer: each list is walked once per check, by builtins where it can.)
        logprobs, probs = self.top_logprobs, self.top_probs
        if logprobs:
            _a_distribution("top_logprobs", list(map(exp, map(_LOGPROB, logprobs))))
        if probs:
            _a_distribution("top_probs", list(map(_PROB, probs)))
        if logprobs and len(set(map(_ID, logprobs))) != len(logprobs):
            raise PydanticCustomError("implausible", "{listed} lists a token more than once", {"listed": "top_logprobs"})
        if probs and len(set(map(_ID, probs))) != len(probs):
            raise PydanticCustomError("implausible", "{listed} lists a token more than once", {"listed": "top_probs"})
        return self

    def candidates(self) -> list["Candidate"]:
        """(id, token, bytes, probability) for the listed candidates, whichever shape came."""
        if self.top_logprobs is not None:
            return [Candidate(c["id"], c["token"], c.get("bytes"), math.exp(c["logprob"])) for c in self.top_logprobs]
        if self.top_probs is not None:
            return [Candidate(c["id"], c["token"], c.get("bytes"), c["prob"]) for c in self.top_probs]
        return []


class Candidate(NamedTuple):
    """One listed candidate of a position: its probability from a logprob or as the server gave it."""

    id: int
    token: str
    bytes: list[int] | None
    probability: float


class Timings(ServerRecord):
    cache_n: Count = 0
    prompt_n: Count
    prompt_ms: Millis
    prompt_per_token_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_n: Count
    predicted_ms: Millis
    predicted_per_token_ms: float | None = None
    predicted_per_second: float | None = None
    # Speculative decoding only (a server started with --spec-type): tokens drafted, and of those
    # the ones the target model accepted, over the whole generation. Absent when nothing was drafted.
    draft_n: Count | None = None
    draft_n_accepted: Count | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "Timings":
        # Time is spent on every evaluated prompt token and on every decode pass after the first token.
        if self.prompt_n > 0 and self.prompt_ms == 0:
            raise PydanticCustomError("implausible", "prompt_ms is 0 for {n} prompt tokens", {"n": self.prompt_n})
        if self.predicted_n > 1 and self.predicted_ms == 0:
            raise PydanticCustomError("implausible", "predicted_ms is 0 for {n} generated tokens", {"n": self.predicted_n})
        # A time so small that the speed it gives is no finite number (a subnormal prompt_ms) is no measurement.
        if self.prompt_n > 0 and not math.isfinite(self.prompt_n / self.prompt_ms * 1000.0):
            raise PydanticCustomError("implausible", "prompt_ms {ms!r} for {n} prompt tokens makes the prefill speed "
                                      "infinite", {"ms": self.prompt_ms, "n": self.prompt_n})
        per_token = self.predicted_ms / max(self.predicted_n - 1, 1)
        if self.predicted_n > 1 and (per_token == 0 or not math.isfinite(1000.0 / per_token)):
            raise PydanticCustomError("implausible", "predicted_ms {ms!r} for {n} generated tokens makes the decode "
                                      "speed infinite", {"ms": self.predicted_ms, "n": self.predicted_n})
        if self.draft_n is not None and self.draft_n_accepted is not None and self.draft_n_accepted > self.draft_n:
            raise PydanticCustomError("implausible", "more draft tokens accepted than drafted", {})
        return self


class Completion(ServerRecord):
    content: str
    tokens: list[TokenId] = []
    stop_type: str | None = None
    tokens_evaluated: Count | None = None
    tokens_cached: Count | None = None
    generation_settings: dict[str, Any] | None = None
    timings: Timings
    completion_probabilities: list[TokenProbabilities] = []

    def first_position(self, build: str | None = None) -> TokenProbabilities:
        """Probabilities of the first generated token; a request with n_probs must have them."""
        if not self.completion_probabilities:
            raise MissingField("/completion", "completion_probabilities", build)
        return self.completion_probabilities[0]


class StreamEvent(ServerRecord):
    """One `data:` event of a streamed /completion (`stream: true`): the text it adds, and the
    number of tokens generated so far (`tokens_predicted`). The last event has `stop: true` and
    the answer's `timings`. A token whose bytes end mid-character is held back by the server
    and sent with the token that completes the character: one event then adds several tokens
    (its `tokens` lists only the last of them, as the embedded engine streams it), and tokens of
    a character left unfinished at the end are counted only by the final event."""

    content: str = ""
    tokens: list[TokenId] = []
    stop: bool = False
    tokens_predicted: Count | None = None
    stop_type: str | None = None
    completion_probabilities: list[TokenProbabilities] = []
    timings: Timings | None = None


class ArrivedEvent(BaseModel):
    """A stream event as the client saw it: where it started in the body and when it arrived."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offset: int                       # byte offset of the event in the response body
    arrived_ms: float                 # ms after the request was sent, on the client's monotonic clock
    event: StreamEvent


class TokenArrival(NamedTuple):
    """Tokens generated so far when an event arrived, and its arrival time (ms after sending)."""

    tokens: int
    arrived_ms: float


class StreamedCompletion(BaseModel):
    """A streamed /completion: every event with its arrival time, and the final event's `timings`.
    The last event is the final one, so its arrival is the end of the answer (end-to-end time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[ArrivedEvent]
    timings: Timings

    @property
    def ended_ms(self) -> float:
        return self.events[-1].arrived_ms

    @property
    def content(self) -> str:
        return "".join(e.event.content for e in self.events)

    def arrivals(self) -> list[TokenArrival]:
        """One entry per event that brought tokens, in order. The count is the server's
        `tokens_predicted`; a build without it counts an event's `tokens` (one if it has text)."""
        found, so_far = [], 0
        for e in self.events:
            ev = e.event
            if ev.tokens_predicted is not None:
                now = ev.tokens_predicted
            else:
                now = so_far + (len(ev.tokens) or (1 if ev.content else 0))
            if now > so_far:
                found.append(TokenArrival(now, e.arrived_ms))
                so_far = now
        return found


def shown_token(token: str, raw: list[int] | None = None) -> str:
    """A token with its spacing visible: the repr of its text, or of its bytes when they are not UTF-8."""
    if raw is not None:
        data = bytes(raw)
        try:
            return repr(data.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(data)
    return repr(token)


class ModelList(ServerRecord):
    data: list[dict[str, Any]] = []


# --- speeds: the one place where raw timings become tokens per second -------------------

def prefill_tokens_per_s(t: Timings) -> float:
    """Prompt tokens evaluated per second (`prompt_n` tokens in `prompt_ms`)."""
    return t.prompt_n / t.prompt_ms * 1000.0 if t.prompt_ms > 0 else float("nan")


def decode_tokens_per_s(t: Timings) -> float:
    ms = decode_ms_per_token(t)
    return 1000.0 / ms if ms and ms > 0 and not math.isnan(ms) else float("nan")


# --- parsing ----------------------------------------------------------------------------

R = TypeVar("R", bound=ServerRecord)
_OUT_OF_RANGE = {"finite_number": "not a finite number", "less_than_equal": "above the largest possible value",
                 "greater_than_equal": "below the smallest possible value"}


def parse(model: type[R], data: Any, *, path: str, url: str = "", build: str | None = None) -> R:
    """Validate a decoded JSON body; a missing field is named, any other mismatch is 'malformed'."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            if err["type"] == "missing":
                field = ".".join(str(p) for p in err["loc"])
                raise MissingField(path, field, build) from None
        for err in exc.errors():
            if err["type"] in _OUT_OF_RANGE:
                field = ".".join(str(p) for p in err["loc"])
                raise ImplausibleValue(path, field, err.get("input"), _OUT_OF_RANGE[err["type"]], build) from None
            if err["type"] == "implausible":
                field = ".".join(str(p) for p in err["loc"]) or "the answer"
                value = {k: v for k, v in (err.get("input") or {}).items() if "_n" in k or "_ms" in k} \
                    if isinstance(err.get("input"), dict) else err.get("input")
                value = value if value != {} else Ellipsis  # a position's candidates: the reason names them
                raise ImplausibleValue(path, field, value, err["msg"], build) from None
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        raise MalformedResponse(url, path, f"{where}: {first['msg']}", str(data)) from None


def check_asked(answer: "Completion | StreamedCompletion", settings: dict[str, Any], *, path: str,
                build: str | None = None) -> None:
    """An answer holds what its request asked, or ImplausibleValue names the field: at least one generated token
    and at most n_predict positions where n_predict asked for some; where n_probs asked for candidates, one
    position per generated token (not streamed) and between 1 and n_probs candidates in each; no more positions
    than generated tokens otherwise."""
    n_predict, n_probs = settings.get("n_predict"), settings.get("n_probs")
    asked = n_probs if isinstance(n_probs, int) and not isinstance(n_probs, bool) and n_probs > 0 else 0
    generated = answer.timings.predicted_n
    limit = n_predict if isinstance(n_predict, int) and not isinstance(n_predict, bool) and n_predict > 0 else None
    if limit is not None and generated == 0:
        raise ImplausibleValue(path, "timings.predicted_n", 0, f"no token generated where n_predict asked for "
                               f"{n_predict}, and a server always generates at least one", build)
    if isinstance(answer, Completion):
        positions = answer.completion_probabilities
        if limit is not None and len(positions) > limit:
            raise ImplausibleValue(path, "the number of completion_probabilities", len(positions),
                                   f"one position per generated token, and n_predict asked for {n_predict}", build)
        if (asked and len(positions) != generated) or len(positions) > generated:
            raise ImplausibleValue(path, "the number of completion_probabilities", len(positions),
                                   f"one position per generated token, and timings.predicted_n is {generated}", build)
    else:
        positions = [p for e in answer.events for p in e.event.completion_probabilities]
    if not asked:
        return
    for i, position in enumerate(positions):
        listed, name = ((position.top_logprobs, "top_logprobs") if position.top_logprobs is not None
                        else (position.top_probs or [], "top_probs"))
        if not listed or len(listed) > asked:
            raise ImplausibleValue(path, f"the number of completion_probabilities.{i}.{name}", len(listed),
                                   f"n_probs asked for 1 to {asked} candidates at each position", build)


_METRIC_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {name (with labels): value}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _METRIC_LINE.match(line)
        if not m:
            continue
        try:
            values[m.group(1)] = float(m.group(2))
        except ValueError:
            continue
    return values
