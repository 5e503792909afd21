"""Lesson 5b's plan: what speculative decoding asks, recorded once in the run as the host value `plan`.

- the models: the target (the default model at its widest) and the drafts (the same weights quantized);
- the draft lengths (--spec-draft-n-max), the tokens per request, the rounds over every configuration, each server's
  context and the pinned seed;
- the two prompts: a short one for the drafts, and a text that repeats for the n-gram speculation, which looks the
  last tokens up earlier in the context and copies what followed;
- whether one streamed request more per configuration is timed on the client's clock.

A run recorded before plans existed (schema version 0) recorded `repeat` (--repeat: the lesson ran min(2, repeat)
rounds) and, since the lesson streamed, `client_clock` (none before: no streamed requests). `UPGRADES[0]` reads them
into version 1, so the lesson reads only the current plan."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel

from bytesup.store.results import upgrade
from bytesup.units import SEED

VERSION = 1
# What a run recorded before plans holds, by host value, and the plan reads back from it.
READS = ("repeat", "client_clock")
# Rounds over every configuration: --repeat, capped at MAX_ROUNDS. A cap, not the run's rule for samples (at least a
# minimum): a round is every configuration once, and the lesson keeps its time down; the plan records the rounds.
# Three, so that each median leaves one slow request out: with two (runs before 2026-12-06), a median was the mean of
# both, and one request at 72 tokens/s beside one at 118 set the default model 30% below the other lessons.
MAX_ROUNDS = 3

SHORT = "The capital of France is"
# ngram-simple drafts from the text itself: it looks the last 12 tokens up earlier in the context and copies what
# followed (up to 48 tokens, llama.cpp's defaults). A text that repeats with a period of a few dozen tokens gives it
# something to find.
REPETITIVE = ("Row, row, row your boat, gently down the stream. "
              "Merrily, merrily, merrily, merrily, life is but a dream.\n") * 3


class Plan(BaseModel):
    schema_version: int = VERSION
    targets: list[str]  # "smollm2-135m-f16" adds a second width (about 15 s more)
    drafts: list[str]
    draft_lengths: list[int]  # --spec-draft-n-max
    n_predict: int  # tokens per request: a few seconds each on 2 cores
    rounds: int  # rounds over every configuration
    ctx_size: int  # context of each server: the longest prompt and n_predict fit
    seed: int
    prompts: dict[str, str]  # by name: "short" for the drafts, "repetitive" for the n-grams
    stream: bool  # one streamed request per configuration, after the rounds

    @property
    def short(self) -> str:
        return self.prompts["short"]

    @property
    def repetitive(self) -> str:
        return self.prompts["repetitive"]

    def prompt_name(self, prompt: str) -> str:
        return next(name for name, text in self.prompts.items() if text == prompt)


def current(repeat: int) -> Plan:
    """The plan of a run made now, with --repeat `repeat`."""
    return Plan(targets=["smollm2-135m-f32"], drafts=["smollm2-135m-q4_1", "smollm2-135m-q8_0"], draft_lengths=[4, 8],
                n_predict=64, rounds=min(MAX_ROUNDS, repeat), ctx_size=512, seed=SEED,
                prompts={"short": SHORT, "repetitive": REPETITIVE}, stream=True)


def before_plans(host_values: dict[str, Any]) -> dict[str, Any]:
    """A run recorded before plans existed, as a version-0 plan: the host values of READS it recorded."""
    return {"schema_version": 0, "host_values": {k: v for k, v in host_values.items() if k in READS}}


def _from_host_values(old: dict[str, Any]) -> dict[str, Any]:
    """0 → 1: the lesson's constants of then, its rounds from --repeat, and whether it streamed."""
    values = old["host_values"]
    return {"schema_version": 1, "targets": ["smollm2-135m-f32"], "drafts": ["smollm2-135m-q4_1", "smollm2-135m-q8_0"],
            "draft_lengths": [4, 8], "n_predict": 64, "rounds": min(2, int(values["repeat"])), "ctx_size": 512,
            "seed": 42, "prompts": {"short": SHORT, "repetitive": REPETITIVE}, "stream": "client_clock" in values}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _from_host_values}


def read(recorded: Any) -> Plan:
    """A recorded plan (or `before_plans` of an older run) brought to the current version and typed."""
    return Plan.model_validate(upgrade(recorded, "lesson 5b plan", "lesson 5b's recorded plan", VERSION, UPGRADES))


def from_older(old: Mapping[str, Any]) -> Plan:
    """The plan of a run recorded before plans, from the host values of READS it recorded."""
    return read(before_plans(dict(old)))
