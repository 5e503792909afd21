"""Lesson N — Title: one paragraph on what it measures (here: the eight likeliest next tokens, and decode speed)."""

import math
from dataclasses import dataclass

from bytesup.lesson import LessonContext
from bytesup.llama.responses import Completion, decode_tokens_per_s, shown_token
from bytesup.store.facts.lesson04 import ShownTable, ShownToken, TopTokens
from bytesup.store.rows import cells, column, columns

TITLE = "Lesson title"
PROMPT = "The cat sat on the"


# --- requests: what the server answers (recorded, and replayed exactly) ---------------------------

def request_next(ctx: LessonContext) -> Completion:
    # temperature 0, a pinned seed and no prompt cache: the same request, and the same answer, every run
    return ctx.server.completion(PROMPT, n_predict=1, n_probs=8, temperature=0, seed=42, cache_prompt=False)


def request_timed(ctx: LessonContext) -> list[Completion]:
    return [ctx.server.completion(PROMPT, n_predict=16, temperature=0, seed=42, cache_prompt=False, ignore_eos=True)
            for _ in range(ctx.repeat)]


# --- computation: typed results, and the table's rows as named records -----------------------------

@dataclass(frozen=True)
class Candidate:
    rank: int = column("rank")
    token: str = column("token")
    probability: float = column("probability")


def candidates(done: Completion) -> list[Candidate]:
    return [Candidate(i, shown_token(c.token, c.bytes), c.probability)
            for i, c in enumerate(done.first_position().candidates(), start=1)]


# --- what the lesson records: measurements and facts, never from a rendering function -------------

def record(ctx: LessonContext, done: Completion, ranked: list[Candidate], timed: list[Completion]) -> None:
    ctx.measure("decode_tokens_per_s", "tokens/s", [decode_tokens_per_s(c.timings) for c in timed], higher_is_better=True)
    listed = done.first_position().candidates()
    ctx.fact(TopTokens({"top8_template": ShownTable(prompt=PROMPT, tokens=[
        ShownToken(rank=r.rank, id=c.id, token=r.token, probability=r.probability, logprob=math.log(r.probability),
                   server_probability=None) for r, c in zip(ranked, listed, strict=True)])}))


# --- rendering: tables and notes computed from the rows ---------------------------------------------

def render(ctx: LessonContext, ranked: list[Candidate]) -> None:
    ctx.table("top8_template", f"The next token after {PROMPT!r}", columns(Candidate), cells(ranked),
              notes=[f"The likeliest token, {ranked[0].token}, has {100 * ranked[0].probability:.3g}%."])


# --- the lesson ----------------------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.step("asking for the next token")
    done = request_next(ctx)
    ranked = candidates(done)
    record(ctx, done, ranked, request_timed(ctx))
    render(ctx, ranked)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)  # python lessons/NN_name.py [--server URL] [--out DIR] [--replay RUN] [--model GGUF]
