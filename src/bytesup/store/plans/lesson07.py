"""Lesson 7's plan: what the hardware fit asks, recorded once in the run as the host value `plan`.

- the matmul that measures this CPU's compute ceiling (its size, its timed repeats);
- the timed prefill placed on the roofline (a warm-up, the timed samples, the prompt's tokens);
- the batching sweep: the slots P of the servers the lesson starts, each one's context, the batches per level (from
  version 2 the most, under a stopping rule), the tokens each sequence generates, the prompt, the seeds, and whether
  one /metrics reading serves as the counters after one batch and before the next.

A run recorded before plans existed (schema version 0) recorded some of this under host values of its own:
`prefill_plan` since the lesson timed a prefill (none before: no prefill), `shared_metrics_reads` since batches
shared their readings (none before: two readings per batch), and `repeat`, the batches per level. `UPGRADES[0]`
reads them into version 1, so the lesson reads only the current plan."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel

from bytesup.store.plans.stopping import StoppingRule, up_to
from bytesup.store.results import upgrade

VERSION = 2
# What a run recorded before plans holds, by host value, and the plan reads back from it.
READS = ("repeat", "prefill_plan", "shared_metrics_reads")


# Each level's batches (version 2): at least two, at most --repeat, stopping once the median per-sequence decode
# speed and the median speed of the whole batch are each known within ±5%, or after LEVEL_BUDGET_S of the batches'
# wall time. A median known to ±5% keeps the claim that lessons agree on the default model's decode (P = 1, ±10% at
# least) clear by half, and the batching table's ratios to one sequence (1 to about 3×) to their second digit.
MIN_BATCHES = 2
LEVEL_TIGHT = 0.05
LEVEL_BUDGET_S = 10.0


class Prefill(BaseModel):
    """The timed prefill: `warmup` untimed prompts, then `samples` timed ones of `tokens` tokens (0 samples: none)."""
    warmup: int
    samples: int
    tokens: int


class Plan(BaseModel):
    schema_version: int = VERSION
    matmul_size: int  # square float32 matmul: long enough to time reliably
    matmul_repeats: int
    prefill: Prefill
    parallel: list[int]  # slots of the servers the lesson starts for the sweep (a user's server: its own slots)
    ctx_per_slot: int  # each slot's context: the short prompt and the generated tokens fit easily
    batches: int  # batches per level P
    batch_n_predict: int  # tokens each sequence generates in one batch
    batch_prompt: str
    batch_seed_base: int  # request i of batch r at level P gets seed base + 1000·P + 100·r + i
    shared_metrics_reads: bool
    batch_rule: StoppingRule | None = None  # each level's batches under a stopping rule (version 2); None: `batches`


def current(samples: int, batches: int) -> Plan:
    """The plan of a run made now: `samples` timed matmuls and timed prefills (the run's rule for a median with its
    spread: `LessonContext.samples`), and up to `batches` per level under the levels' stopping rule (likewise, at
    least MIN_BATCHES)."""
    return Plan(matmul_size=2048, matmul_repeats=samples, prefill=Prefill(warmup=1, samples=samples, tokens=128),
                parallel=[1, 2, 4, 8], ctx_per_slot=512, batches=batches, batch_n_predict=64,
                batch_prompt="The cat sat on the", batch_seed_base=7000, shared_metrics_reads=True,
                batch_rule=up_to(batches, MIN_BATCHES, LEVEL_TIGHT, LEVEL_BUDGET_S))


def before_plans(host_values: dict[str, Any]) -> dict[str, Any]:
    """A run recorded before plans existed, as a version-0 plan: the host values of READS it recorded."""
    return {"schema_version": 0, "host_values": {k: v for k, v in host_values.items() if k in READS}}


def _from_host_values(old: dict[str, Any]) -> dict[str, Any]:
    """0 → 1: the lesson's constants of then (the matmul timed --repeat + 2 times), and what the run recorded of its
    prefill and its readings."""
    values = old["host_values"]
    repeat = int(values["repeat"])
    return {"schema_version": 1, "matmul_size": 2048, "matmul_repeats": repeat + 2,
            "prefill": values.get("prefill_plan", {"warmup": 0, "samples": 0, "tokens": 128}),
            "parallel": [1, 2, 4, 8], "ctx_per_slot": 512, "batches": repeat, "batch_n_predict": 64,
            "batch_prompt": "The cat sat on the", "batch_seed_base": 7000,
            "shared_metrics_reads": bool(values.get("shared_metrics_reads", False))}


def _batch_rule(old: dict[str, Any]) -> dict[str, Any]:
    """1 → 2: each level's batches under a stopping rule; a plan recorded before took `batches` of them."""
    return {**old, "schema_version": 2, "batch_rule": None}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _from_host_values, 1: _batch_rule}


def read(recorded: Any) -> Plan:
    """A recorded plan (or `before_plans` of an older run) brought to the current version and typed."""
    return Plan.model_validate(upgrade(recorded, "lesson 7 plan", "lesson 7's recorded plan", VERSION, UPGRADES))


def from_older(old: Mapping[str, Any]) -> Plan:
    """The plan of a run recorded before plans, from the host values of READS it recorded."""
    return read(before_plans(dict(old)))
