"""Lesson 4's plan: the prompts it asks the next token of, the timed requests, the files of the numpy pass and
whether llama-bench runs beside the server (at which turns, after what warm-up).

A run records its plan once, as the host value `plan`. A run recorded before the plan existed is read by
`from_older` from the host values it did record, through the numbered table `UPGRADES`: each version adds one
part of the lesson, and an older run lacks the parts added after it, so its replay asks for exactly its requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict

from bytesup.course import published
from bytesup.llama.shapes import ServerShape
from bytesup.store.plans import upgrades
from bytesup.store.plans.stopping import StoppingRule, up_to
from bytesup.units import PINNED, SEED

NAME = "plan"  # the host value that holds it
VERSION = 4

# The lesson's four prompts, with the table each one fills; prompts given with --prompt follow them.
PROMPTS = [
    ("top8_capital_of_france", "The capital of France is"),
    ("top8_cat_sat", "The cat sat on the"),
    ("top8_fibonacci", "def fibonacci(n):\n    if n"),
    ("top8_for_loop", "for (int i = 0; i <"),
]
# One pass, eight candidates from the full softmax (post_sampling_probs false: before top-k,
# top-p or temperature touch it). Temperature 0 and a seed make the generated token repeatable;
# cache_prompt false makes each prompt a fresh forward pass from its first token.
TOP8 = {"n_predict": 1, "n_probs": 8, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": SEED}
# The same eight, as the server's own probabilities: temperature 1.0 alone in the chain, with every
# cut off (top_k 0, top_p 1, min_p 0), leaves the full softmax, and post_sampling_probs reports it
# as probabilities the server computed rather than logprobs. Seed and cache_prompt as above.
SERVER_PROBS = {"n_predict": 1, "n_probs": 8, "temperature": 1.0, "samplers": ["temperature"], "top_k": 0,
                "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": False, "seed": SEED}

SHORT_PROMPT = "The capital of France is"
N_PREDICT = 32                    # tokens decoded per timed request
TIMED = {**PINNED, "n_predict": N_PREDICT}
BENCH_REPETITIONS = 1             # llama-bench's repetitions at each of its turns: one sample a phase a turn
# llama-bench's turns: before the timed requests and after them (version 4), each a prefill of the long prompt, about
# 6 s on 2 cores; before version 4 also between the long and the short prompt's requests.
BENCH_TURNS = ("before", "after")
BENCH_TURNS_3 = ("before", "between", "after")
# The first turn's warm-up (version 4): a prefill of this many tokens first, not kept. Before version 4 llama-bench's
# own warm-up, a whole run of the long prefill, about 6 s; the later turns never had one and measured alike.
BENCH_WARMUP_TOKENS = 32
CONTEXT_MARGIN = 16               # tokens of context left free beyond prompt + n_predict
LONG_PROMPT_TOKENS: int = published.LESSON4["long_prompt_tokens"]  # the published long prompt's length
MIN_REPEAT = 2                    # at least two runs of each timed request, as published
# The long prompt's requests (version 4) stop once the median prefill and decode after it are each known within ±5%,
# between MIN_REPEAT and the run's --repeat, or once their server time reaches LONG_BUDGET_S. The claims that read
# them set them against decode after the short prompt, about 2× and 4× away (prefill_faster_than_decode,
# decode_slows_with_context); ±5% keeps the third clock's ratio and a ±10% comparison of two runs clear by half.
LONG_TIGHT = 0.05
LONG_BUDGET_S = 30.0

# The numpy pass is set against the server a second time on the default model's weights in float32, where the
# server rounds no activations; that server holds only the short prompts.
F32_WIDTH = "smollm2-135m-f32"
F32_SLOTS, F32_CONTEXT = 1, 256


def f32_server(model: Path) -> ServerShape:
    """The f32 width's server: one slot, a context of F32_CONTEXT tokens (the four prompts and a token each)."""
    return ServerShape(model, F32_SLOTS, F32_CONTEXT)


class NumpyFiles(BaseModel):
    """The files the numpy pass reads, by name, path and sha256 (None: not readable here, or no f32 width)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    served: dict[str, Any] | None
    f32: dict[str, Any] | None


class Plan(BaseModel):
    """What lesson 4 asks in one run."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int = VERSION
    prompts: list[tuple[str, str]]   # (table name, prompt): the published four, then the given ones
    repeat: int                      # runs of each timed request
    numpy: NumpyFiles | None         # None: the run was recorded before the numpy pass
    llama_bench: bool                # whether llama-bench runs beside the timed requests
    # Version 4: the long prompt's stopping rule (None: `repeat` requests), llama-bench's turns, and the tokens of the
    # prefill that warms it up at its first turn (None: llama-bench's own warm-up).
    long: StoppingRule | None = None
    bench_turns: tuple[str, ...] = BENCH_TURNS_3
    bench_warmup_tokens: int | None = None

    def settings(self, n_ctx: int, n_long: int, long_stopped: dict[str, Any] | None = None) -> dict[str, Any]:
        """The result's `settings`: the request bodies and the lengths the timed requests used; with a stopping rule,
        how many long-prompt requests it took and what stopped them (`long_stopped`, course.stopping.Stop's JSON)."""
        return {"top8": TOP8, "server_probabilities": SERVER_PROBS, "timed": TIMED, "short_prompt": SHORT_PROMPT,
                "long_prompt_tokens": n_long, "n_ctx": n_ctx, "repeat": self.repeat,
                **({"long_prompt_stopped": long_stopped} if long_stopped is not None else {})}


def prompts(given: list[str] | None) -> list[tuple[str, str]]:
    """The published four, then the prompts given with --prompt, in order (tables top8_prompt_1, top8_prompt_2, …)."""
    return PROMPTS + [(f"top8_prompt_{k}", text) for k, text in enumerate(given or [], start=1)]


def long_prompt_length(n_ctx: int, wanted: int = LONG_PROMPT_TOKENS, n_predict: int = N_PREDICT,
                       margin: int = CONTEXT_MARGIN) -> int:
    """The published prompt length, shortened when the server's context cannot hold it plus the decode."""
    return max(1, min(wanted, n_ctx - n_predict - margin))


def at_least_two(repeat: Any) -> Any:
    """--repeat as the lesson uses it: MIN_REPEAT at least (anything but a whole number is left for the plan to refuse)."""
    return max(MIN_REPEAT, repeat) if isinstance(repeat, int) and not isinstance(repeat, bool) else repeat


def fresh(given_prompts: list[str] | None, repeat: int, numpy: NumpyFiles) -> Plan:
    """This version's plan for a run made now: `repeat` runs of the short prompt's timed request, as the run's rule
    gave them (`LessonContext.samples(MIN_REPEAT)`), and up to as many of the long prompt's under its stopping rule;
    llama-bench before and after them. Fewer than MIN_REPEAT is a ValueError."""
    if repeat < MIN_REPEAT:
        raise ValueError(f"lesson 4 times each request at least {MIN_REPEAT} times, not {repeat}")
    return Plan(prompts=prompts(given_prompts), repeat=repeat, numpy=numpy, llama_bench=True,
                long=up_to(repeat, MIN_REPEAT, LONG_TIGHT, LONG_BUDGET_S), bench_turns=BENCH_TURNS,
                bench_warmup_tokens=BENCH_WARMUP_TOKENS)


# The numbered table (store.plans.upgrades): version → (what it added, the host value a run recorded it by, how an
# older run's host values give it). Plans are recorded from version 3 on.
UPGRADES: upgrades.Table = {
    1: ("the next-token tables, the timed requests and the ceiling", None,
        lambda _, old: {"prompts": prompts(old.get("option_prompts")), "repeat": at_least_two(old.get("repeat")),
                        "numpy": None, "llama_bench": False}),
    2: ("the forward pass in numpy, on the files of the host value numpy_plan", "numpy_plan",
        lambda plan, old: {**plan, "numpy": old["numpy_plan"]}),
    3: ("llama-bench before, between and after the timed requests", "llama_bench_before",
        lambda plan, old: {**plan, "llama_bench": True}),
}
# The host values `from_older` reads: those of version 1, and those that show each later version.
READ_FROM = ["repeat", "option_prompts", *upgrades.shown_by(UPGRADES)]


def from_older(old: Mapping[str, Any]) -> Plan:
    """The plan of a run recorded before plans, from the host values it recorded (those of `READ_FROM` it has)."""
    return upgrades.plan_of(Plan, upgrades.apply(UPGRADES, old), "04")


# Versions after the first recorded one: version → (what it added, how a recorded plan of an earlier version gives it).
RECORDED_UPGRADES: dict[int, tuple[str, Any]] = {
    4: ("the long prompt's requests under a stopping rule; llama-bench before and after them, warmed up by a short prefill",
        lambda plan: {**plan, "long": None, "bench_turns": list(BENCH_TURNS_3), "bench_warmup_tokens": None}),
}


def read(stored: Mapping[str, Any]) -> Plan:
    """A recorded plan as this version's: version 3 is the first recorded, and each later version's upgrade applies
    to a plan recorded before it."""
    return upgrades.plan_of(Plan, upgrades.recorded(RECORDED_UPGRADES, stored), "04")
