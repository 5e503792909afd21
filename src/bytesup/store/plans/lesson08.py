"""Lesson 8's plan: what the capstone asks of its servers, recorded once in the run as the host value `plan`.

- the models swept without --sizes;
- the prompt and the tokens each timed decode generates, and each slot's context;
- the samples: warm-up decodes dropped, timed decodes kept, and the numbers of sequences P decoded together on the
  first model of each weight type (the server then has that many slots);
- the prefill timed on the first model of each weight type, if any;
- whether numpy's matrix-vector reading is taken beside the run's bandwidth, and whether the servers may be up at
  once with the timed decodes going round them in turns (where the models fit in memory together);
- what each width of the trained model costs in accuracy: numpy's forward pass (bytesup.models.forward) on each
  width's file over a few short prompts, every position's next-token distribution set against the reference width's
  (`AccuracyPlan`).

A run recorded before the plan existed followed one of its earlier versions, and says which by the host values it
did record: `read_plan` starts from what the lesson asked at first (version 0) and brings it up through `UPGRADES`, each
step reading the value that recorded the change (the sample plan, numpy's matrix-vector reading, the models swept,
the turns, the prefill). A recorded plan is brought up the same way from its own version. The accuracy (version 6)
is computed from the width files and from nothing the run recorded, so a run recorded before it gets it on replay
where the files are there, and says it is not recomputed where they are not. Version 7 added a second model of each
weight type to the models swept; a run recorded before keeps the models it swept.

Beside the plan, what it says of the sweep's models and servers: the models --sizes names (`parse_sizes`), whether
they go in turns (`in_turns`), the servers' shape (`plan_shape`, and the run's own server's, `flags_shape`), and the
requests of each batch of P decodes (`batch_bodies`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict

from bytesup.course import robust
from bytesup.errors import BytesupError
from bytesup.llama.shapes import ServerShape
from bytesup.models import catalog
from bytesup.store.facts.lesson08 import ModelInfo
from bytesup.store.results import upgrade
from bytesup.units import PINNED

PLAN_VALUE = "plan"  # the host value the plan is recorded as
VERSION = 8
# Every host value `read` looks at: the plan itself, then what a run recorded before it holds instead.
PLAN_READS = (PLAN_VALUE, "repeat", "sample_plan", "matvec_bandwidth", "default_sizes", "sweep_in_turns", "prefill_plan")

# The widths of one model, then models of other shapes: medium-q8_0 (16 blocks of 1,024) and large-q8_0 (18 of
# 2,048) give the decode-time model three shapes, so its cost per block, its arithmetic per parameter and its
# bandwidth can be told apart; then medium-q4_1, medium-f16 and medium-f32, a second model of each other weight type
# of the default model, so that every type's arithmetic per parameter c is fitted on two models and each model can be
# predicted by the others (version 7).
DEFAULT_SIZES = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32", "medium-q8_0",
                 "large-q8_0", "medium-q4_1", "medium-f16", "medium-f32")
# The models swept without --sizes from version 3 to 6, and before version 3 without medium-q8_0.
SIZES_6 = DEFAULT_SIZES[:6]
PROMPT = "The capital of France is"  # short: the measurement is the decode after it; its top token is the answer
N_PREDICT = 32
CONTEXT_PER_SLOT = 256  # the short prompt and the generated tokens fit; a small context keeps each server light
LEVELS = (2, 4)  # P besides the sweep's own P = 1 decodes, on the first model of each weight type
MEMORY_SHARE = 0.5  # a model is skipped when its file would take more than this share of the available memory
PREFILL_TOKENS = 128  # each weight type's timed prefill: one micro-batch, as lesson 7's measured prefill point
# Each server's warm-up decode (version 8): this many tokens, where it had the timed decodes' N_PREDICT. After the
# answer's request every model's 32-token warm-up ran as fast as its timed decodes in the last make run (smollm2-135m-
# q4_1 196 ms against 183-210, large-q8_0 898 against 896-978), so what warms up decode is its first steps: eight
# run every single-token kernel and the sampling, in a quarter of the time (4.4 s for nine models).
WARMUP_TOKENS = 8
# The accuracy's reference: the trained model's widest width, every other width's distributions set against its.
ACCURACY_REFERENCE = "smollm2-135m-f32"
# The accuracy's prompts: the lesson's own, then lesson 4's other published three, as SmolLM2's tokenizer reads them
# (its server's /tokenize with add_special, which for SmolLM2 adds no token: tests/test_lesson08.py checks them
# against lesson 4's recorded answers and against the model file's own vocabulary). Every position of every prompt
# counts: 29 next-token distributions per width.
ACCURACY_PROMPTS = (
    ("capital_of_france", PROMPT, (504, 3575, 282, 4649, 314)),
    ("cat_sat", "The cat sat on the", (504, 2644, 2643, 335, 260)),
    ("fibonacci", "def fibonacci(n):\n    if n", (1604, 3987, 46477, 24, 94, 727, 472, 585, 304)),
    ("for_loop", "for (int i = 0; i <", (1710, 365, 591, 2056, 446, 216, 32, 43, 2056, 2067)),
)


class PrefillPlan(BaseModel):
    """Each weight type's timed prefill: warm-ups dropped, timed prefills kept, of a prompt of `tokens` tokens."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup: int
    samples: int
    tokens: int


class AccuracyPrompt(BaseModel):
    """One prompt of the accuracy, and its token ids in the trained model's vocabulary."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    text: str
    ids: tuple[int, ...]


class AccuracyPlan(BaseModel):
    """What each width of the trained model costs in accuracy: numpy's forward pass on each width's file (found by
    the catalog's sha256) over `prompts`, every position's distribution against the `reference` width's."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str
    prompts: tuple[AccuracyPrompt, ...]


def accuracy_plan() -> AccuracyPlan:
    return AccuracyPlan(reference=ACCURACY_REFERENCE,
                        prompts=tuple(AccuracyPrompt(name=n, text=t, ids=ids) for n, t, ids in ACCURACY_PROMPTS))


class Plan(BaseModel):
    """What lesson 8 asks (see the module)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = VERSION
    default_sizes: tuple[str, ...]  # the models swept without --sizes
    prompt: str
    n_predict: int
    context_per_slot: int
    warmup: int  # decodes per server dropped before the timed ones
    warmup_tokens: int | None = None  # tokens of each warm-up decode (version 8); None: n_predict, as the timed ones
    samples: int  # timed decodes per model at P = 1
    levels: tuple[int, ...]  # P decoded together on the first model of each weight type
    prefill: PrefillPlan | None  # None: no prefill is timed
    matvec: bool  # numpy's matrix-vector reading, where the host's bandwidth feeds decode
    in_turns: bool  # servers up at once and the timed decodes in turns, where the models fit in memory together
    accuracy: AccuracyPlan | None  # None: no accuracy is computed

    def rounds(self, parallel: int) -> int:
        """Batches at P sequences: enough for `samples` per-sequence samples."""
        return -(-self.samples // parallel)

    @property
    def warmup_n_predict(self) -> int:
        """The tokens of each warm-up decode."""
        return self.warmup_tokens if self.warmup_tokens is not None else self.n_predict

    @property
    def slots(self) -> int:
        return max((1, *self.levels))

    @property
    def context(self) -> int:
        """Each server's context: CONTEXT_PER_SLOT for each of its slots."""
        return self.context_per_slot * self.slots


MIN_SAMPLES = robust.MIN_SAMPLES  # timed decodes and prefills per model at least: a median with its spread


BATCH_SEED_BASE = 8000  # each request of a batch gets its own seed, so a replay answers each one exactly


def batch_bodies(parallel: int, r: int, n_predict: int) -> list[dict[str, Any]]:
    """The P requests of batch r, one per slot, PINNED apart from a seed of their own."""
    return [{**PINNED, "n_predict": n_predict, "seed": BATCH_SEED_BASE + 100 * parallel + 10 * r + i, "id_slot": i}
            for i in range(parallel)]


def current_plan(samples: int) -> Plan:
    """The plan of a run made now: one warm-up decode of WARMUP_TOKENS per server, `samples` timed decodes and prefills (the lesson
    asks `ctx.samples(MIN_SAMPLES)`: --repeat, and at least MIN_SAMPLES), LEVELS, every model of DEFAULT_SIZES, and
    the accuracy of the trained model's widths."""
    return Plan(default_sizes=DEFAULT_SIZES, prompt=PROMPT, n_predict=N_PREDICT, context_per_slot=CONTEXT_PER_SLOT,
                warmup=1, warmup_tokens=WARMUP_TOKENS, samples=samples, levels=LEVELS,
                prefill=PrefillPlan(warmup=1, samples=samples, tokens=PREFILL_TOKENS), matvec=True, in_turns=True,
                accuracy=accuracy_plan())


# --- the table of upgrades ---------------------------------------------------------------------------

def first(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """Version 0, what lesson 8 asked at first: ctx.repeat timed decodes and no warm-up, no batches, no prefill,
    no numpy reading, one model after another, and the default models before medium-q8_0 joined."""
    return {"schema_version": 0, "default_sizes": [n for n in SIZES_6 if n != "medium-q8_0"], "prompt": PROMPT,
            "n_predict": N_PREDICT, "context_per_slot": CONTEXT_PER_SLOT, "warmup": 0, "samples": recorded["repeat"],
            "levels": [], "prefill": None, "matvec": False, "in_turns": False, "accuracy": None}


def _sample_plan(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """0 → 1: a warm-up, at least five samples and the batches at P = 2 and 4 (the host value `sample_plan`)."""
    return {**plan, **recorded.get("sample_plan", {}), "schema_version": 1}


def _matvec(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """1 → 2: numpy's matrix-vector reading (the host value `matvec_bandwidth`, where the host's bandwidth applied)."""
    return {**plan, "matvec": plan["matvec"] or "matvec_bandwidth" in recorded, "schema_version": 2}


def _medium(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """2 → 3: medium-q8_0 among the default models (the host value `default_sizes`, recorded without --sizes)."""
    return {**plan, "default_sizes": recorded.get("default_sizes", plan["default_sizes"]), "schema_version": 3}


def _turns(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """3 → 4: the servers up at once and the decodes in turns (the host value `sweep_in_turns`, recorded where the
    models fitted in memory together)."""
    return {**plan, "in_turns": plan["in_turns"] or bool(recorded.get("sweep_in_turns")), "schema_version": 4}


def _prefill(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """4 → 5: a prefill timed on the first model of each weight type (the host value `prefill_plan`)."""
    return {**plan, "prefill": plan["prefill"] or recorded.get("prefill_plan"), "schema_version": 5}


def _accuracy(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """5 → 6: the accuracy of the trained model's widths. It reads the width files, not the run's recordings, so a
    run recorded before it gets it too: its replay computes it where the files are there."""
    return {**plan, "accuracy": accuracy_plan().model_dump(mode="json"), "schema_version": 6}


def _second_of_each_type(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """6 → 7: medium-q4_1, medium-f16 and medium-f32 joined the models swept without --sizes. A run recorded before
    swept the models its plan names, so its models stay as they are: only the version moves."""
    return {**plan, "schema_version": 7}


def _short_warmup(recorded: Mapping[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """7 → 8: each warm-up decode WARMUP_TOKENS long; a run recorded before warmed up with n_predict tokens."""
    return {**plan, "warmup_tokens": None, "schema_version": 8}


# UPGRADES[n] turns version n into n + 1: step(recorded host values, plan), reading the value that recorded the change.
UPGRADES: dict[int, Callable[[Mapping[str, Any], dict[str, Any]], dict[str, Any]]] = {
    0: _sample_plan, 1: _matvec, 2: _medium, 3: _turns, 4: _prefill, 5: _accuracy, 6: _second_of_each_type,
    7: _short_warmup}


def read_plan(recorded: Mapping[str, Any]) -> Plan:
    """The plan a recorded run followed, at VERSION, from its host values (those of PLAN_READS it holds): its own
    plan, or for a run recorded before plans, the one it followed, from the values it did record."""
    start = dict(recorded[PLAN_VALUE]) if PLAN_VALUE in recorded else first(recorded)
    steps = {v: functools.partial(step, recorded) for v, step in UPGRADES.items()}
    return Plan.model_validate(upgrade(start, "lesson 8 plan", "the recorded lesson 8", VERSION, steps))


# --- the models the sweep serves, and the shape of its servers ---------------------------------------

def is_gguf_path(name: str) -> bool:
    """--sizes takes a GGUF file as well as a preset name: a name ending in .gguf is a path."""
    return name.lower().endswith(".gguf")


def parse_sizes(value: Any, defaults: tuple[str, ...] | list[str]) -> list[str]:
    """--sizes as given by the CLI (a list) or as a comma-separated string; `defaults` when absent. Each is a
    preset name or the path of a GGUF file, which must exist."""
    if value is None:
        return list(defaults)
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in names if n and n.strip()]
    missing_files = [n for n in names if is_gguf_path(n) and not Path(n).is_file()]
    if missing_files:
        raise BytesupError(f"No GGUF file at {', '.join(missing_files)} in --sizes.")
    known = catalog.model_names()
    unknown = [n for n in names if n not in known and not is_gguf_path(n)]
    if unknown or not names:
        raise BytesupError(f"Unknown model(s) {', '.join(unknown) or '(none given)'} in --sizes. "
                           f"Models: {', '.join(known)}, or a path to a .gguf file.")
    return names


def plan_shape(model: Path | None, plan: Plan) -> ServerShape:
    """The shape of every server of the sweep: plan.slots slots (the most sequences a model decodes at once), each
    holding plan.context_per_slot tokens."""
    return ServerShape.per_slot(model, plan.slots, plan.context_per_slot)


def flags_shape(flags: Mapping[str, Any]) -> ServerShape | None:
    """The run's own server (where the other lessons measure the default model) as a shape, from its recorded flags;
    None where they do not say."""
    try:
        return ServerShape(None, int(flags.get("--parallel") or 1), int(flags["--ctx-size"]))
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Served:
    """A model the sweep serves, and the P it also decodes at (the plan's levels for the first of its weight type)."""
    name: str
    info: ModelInfo
    levels: tuple[int, ...]


def in_turns(plan: Plan, served: list[Served], available: int | None) -> bool:
    """Whether every server is up at once and the timed decodes go round the models in turns: where the plan says
    so and the models fit in MEMORY_SHARE of the available memory together."""
    fits = bool(available) and sum(s.info.tensor_bytes for s in served) <= MEMORY_SHARE * (available or 0)
    return fits and plan.in_turns
