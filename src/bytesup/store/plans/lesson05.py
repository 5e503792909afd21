"""Lesson 5's plan: the prompts, lengths, seeds, sampler chains and tolerance it asks with, and whether it streams
the loop to time it on the client's clock.

A run records its plan once, as its host value `plan`, and `read` reads it back. A run recorded before plans has none:
`from_older` reads it as version 1 from what it recorded (whether it streamed: its host value `client_clock`, the one
name in `READS`), and `UPGRADES[1]` makes it the version 2 plan of what that run asked. The lesson reads only the
current plan."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict

from bytesup.store.results import upgrade
from bytesup.units import SEED

PLAN_VERSION = 2
# What a run recorded before plans holds, by host value, and the plan reads back from it.
READS = ("client_clock",)


class Sampler(BaseModel):
    """One sampler chain: its label, the server's `samplers` order and their settings (an int stays an int)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    samplers: list[str]
    params: dict[str, int | float]


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = PLAN_VERSION
    seed: int
    loop_prompt: str
    loop_tokens: int
    sampling_prompt: str         # where the model's choice is open: samplers have something to cut
    reference_probs: int         # first try at the full-softmax list; grown if a kept set needs more
    max_reference_probs: int     # never ask for more candidates than this (keeps recordings small)
    max_post_probs: int          # post-sampling candidates asked for at most
    rel_tol: float               # |Δp| / p allowed between our probabilities and the server's
    samplers: list[Sampler]
    seeds: list[int]             # the seeded runs' seeds
    seeded_tokens: int
    fit_n: int                   # the length the latency model is fitted at
    predict_n: list[int]         # the lengths it predicts
    stream_tokens: int | None    # the streamed generation's length; None: the loop is not streamed


def _sampler(label: str, samplers: list[str], params: dict[str, int | float]) -> dict[str, Any]:
    return {"label": label, "samplers": samplers, "params": params}


# What every run recorded before plans asked, word for word (version 1 stated only whether it streamed).
ASKED_BEFORE_PLANS: dict[str, Any] = {
    "seed": 42, "loop_prompt": "The cat sat on the", "loop_tokens": 16, "sampling_prompt": "def fibonacci(n):\n    if n",
    "reference_probs": 64, "max_reference_probs": 4096, "max_post_probs": 32, "rel_tol": 1e-5,
    # Temperature 1.0 leaves a chain's cut as is.
    "samplers": [
        _sampler("greedy", ["temperature"], {"temperature": 0.0}),
        _sampler("temperature 0.5", ["temperature"], {"temperature": 0.5}),
        _sampler("temperature 1.0", ["temperature"], {"temperature": 1.0}),
        _sampler("temperature 1.5", ["temperature"], {"temperature": 1.5}),
        _sampler("top-k 5", ["top_k", "temperature"], {"top_k": 5, "temperature": 1.0}),
        _sampler("top-k 10", ["top_k", "temperature"], {"top_k": 10, "temperature": 1.0}),
        _sampler("top-p 0.5", ["top_p", "temperature"], {"top_p": 0.5, "temperature": 1.0}),
        _sampler("top-p 0.9", ["top_p", "temperature"], {"top_p": 0.9, "temperature": 1.0}),
        _sampler("top-k 10 → top-p 0.5 → temperature 1.5", ["top_k", "top_p", "temperature"],
                 {"top_k": 10, "top_p": 0.5, "temperature": 1.5}),
        _sampler("top-p 0.9 → top-k 10 → temperature 0.5", ["top_p", "top_k", "temperature"],
                 {"top_p": 0.9, "top_k": 10, "temperature": 0.5}),
    ],
    "seeds": [1234, 1234, 5678],  # the same seed twice, then another
    "seeded_tokens": 12, "fit_n": 32, "predict_n": [8, 16, 64, 128],
}
STREAM_TOKENS = 128  # the streamed generation: 127 gaps per repeat, enough for a p99 to mean something


def _from_version_1(old: dict[str, Any]) -> dict[str, Any]:
    """A run recorded before plans asked ASKED_BEFORE_PLANS, and streamed STREAM_TOKENS tokens if it streamed."""
    return {**ASKED_BEFORE_PLANS, "schema_version": 2, "stream_tokens": STREAM_TOKENS if old["streamed"] else None}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_version_1}

# The plan a live run records: what the runs before plans asked, with the loop streamed, and the pinned seed.
CURRENT = Plan.model_validate({**ASKED_BEFORE_PLANS, "seed": SEED, "stream_tokens": STREAM_TOKENS})


def read(recorded: Any) -> Plan:
    """A recorded plan (the host value `plan`), brought to the current version by UPGRADES."""
    return Plan.model_validate(upgrade(recorded, "lesson 5 plan", "lesson 5's recorded plan", PLAN_VERSION, UPGRADES))


def from_older(old: Mapping[str, Any]) -> Plan:
    """The plan of a run recorded before plans, from the host values of READS it recorded: version 1, which says only
    whether the run streamed the loop (it recorded `client_clock`)."""
    return read({"schema_version": 1, "streamed": "client_clock" in old})
