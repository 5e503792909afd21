"""Lesson 6 — Attention and the KV cache

Attention is where positions interact: each new token's query is compared with the keys of every
earlier position and takes a weighted sum of their values. Those keys and values are kept, layer
by layer, in the KV cache, so a new token costs one pass over the new position instead of the
whole sequence. This script computes the cache's size per token from the served model's metadata
(when its file is readable here) and for worked examples (and checks the podcast's figure),
measures decode speed as the context grows and predicts the deeper depths from a line through the
shallower ones, bent at d* where the K and V outgrow the run's last-level cache if the depths past d* show it (else
one line through every fitted depth; each slope split into the KV read and attention's work), times a long prompt with
and without the server's prompt cache, and counts the tokens generation would process without a
cache, by formula and by re-sending the growing text to the server. Last, the same greedy generation runs in numpy from the
GGUF's bytes (bytesup.models.forward), once with a KV cache and once recomputing the whole prefix at every
step: the same tokens, the FLOPs and the time of both ways, beside the server's own tokens.

Its parts: the plan (store/plans/lesson06.py), main and the requests here, the arithmetic (course/kvcache.py,
course/depthtime.py and the computation section at the end), the view (store/views/lesson06.py).
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import os
import random
import statistics

from bytesup.course import depthtime, formulas, kvcache, published, stopping
from bytesup.course.kvcache import AttentionShape, CacheSetup, DepthModel, DepthResult, NumpyDecode, PromptCacheSummary
from bytesup.course.loop import decode_ms_per_token
from bytesup.errors import BytesupError
from bytesup.host import environment
from bytesup.lesson import LessonContext
from bytesup.llama.responses import Completion, decode_tokens_per_s, prefill_tokens_per_s
from bytesup.llama.timed import context_size, long_prompt_tokens, timed_completions
from bytesup.models import forward
from bytesup.models.gguf import read_model_info
from bytesup.store.facts.lesson06 import (CacheRequest, CostRow, DecodeAtDepth, HeldOutDepth, KvExample, KvExamples, ResendStep,
                                          WithAndWithout)
from bytesup.store.plans.lesson06 import (AGAIN, CACHE_BODY, CACHE_REQUESTS, COST_N, COST_PROMPT_TOKENS, COST_TABLE_N, DECODE_N,
                                          DEEPEST_PREFILL, FILLER_PROMPT, MIN_SAMPLES, NUMPY_MAX_FLOAT32_BYTES, NUMPY_N,
                                          READ_FROM, RESEND_BODY, NumpyFile, Plan, cache_prompt_len, depth_plan, fresh,
                                          from_older, read)
from bytesup.store.views import lesson06
from bytesup.store.views.page import stopped as stopped_note
from bytesup.units import GiB

TITLE = "Attention and the KV cache"

# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    plan = the_plan(ctx)
    # The KV cache's size: 2 × layers × KV heads × head width × bytes per element, per token.
    ctx.step("KV cache bytes per token")
    readable = ctx.server_facts()["model_readable"]
    info = ctx.host("model_info", lambda: model_facts(ctx.require_model())) if readable else None
    setup = request_cache_setup(ctx)
    served = served_example(info, setup, ctx.identity.get("model", {}).get("name")) if info is not None else None
    examples = ([served] if served else []) + worked_examples()
    record_kv_cache(ctx, examples, served, info, setup, readable)
    lesson06.show_kv_cache_size(ctx, examples, served, info, setup)
    n_ctx, shape = setup.n_ctx, attention_shape(served, info)

    # Decode speed as the context grows, and the bytes model beside it.
    ids = long_prompt_tokens(ctx.server, max(depth_plan(n_ctx)[-1], cache_prompt_len(n_ctx), 1))
    ctx.step("decode speed as the context grows")
    bandwidth, cache = request_run_bandwidth(ctx)  # before the decode work
    knee = depthtime.knee_depth(cache[0], shape.kv_bytes_per_token if shape is not None else None)
    planned = depth_plan(n_ctx, knee=knee if plan.depths_past_knee else None)
    moved = sorted(set(planned) - set(depth_plan(n_ctx)))
    asked = request_decode_at_depths(ctx, plan, ids, planned)
    depths = [depth_result(depth, runs, plan.depths_from_cache) for depth, runs in asked]
    load = ctx.host("load_average", environment.load_average)
    cores = ctx.host("cpu_count", os.cpu_count)
    record_depths(ctx, depths)
    lesson06.show_decode_vs_depth(ctx, n_ctx, depths, plan.repeat, load, cores,
                                  (moved[0], knee) if moved and knee is not None else None)
    points = None
    if served is not None and info is not None:  # the bytes model: the served model's weights and KV bytes per token
        points = kvcache.bytes_model_points(depths, info["tensor_bytes"], served.per_token)
        lesson06.show_bytes_model(ctx, points, served.per_token, info["tensor_bytes"])

    # A line through the shallow half predicts the deeper depths, bent where the KV cache outgrows the last-level
    # cache if the fitted depths past it lie above the line (else one line through them all); each slope split into
    # the KV read and the rest.
    model, why_no_line = depth_line(depths, n_ctx, shape, bandwidth, cache)
    if model is not None:
        record_depth_line(ctx, model)
    lesson06.show_depth_line(ctx, model, why_no_line)
    lesson06.show_depth_plot(ctx, depths, points, model)

    # A cached prompt prefix skips prefill.
    ctx.step("the prompt cache")
    length = cache_prompt_len(n_ctx)
    requests, stopped = request_prompt_cache(ctx, plan, ids, length)
    summary = kvcache.prompt_cache_summary(requests, AGAIN)
    record_prompt_cache(ctx, length, summary)
    lesson06.show_prompt_cache(ctx, length, requests, summary)
    if stopped is not None and plan.cache_rounds is not None:
        ctx.settings["prompt_cache_stopped"] = stopped.to_json()
        ctx.note(stopped_note("The prompt cache test", "round", stopped, plan.cache_rounds)
                 + " Each round times the prompt twice without the cache.")

    # Without a cache: by formula, then by re-sending the growing text.
    ctx.step("the cost of generating without a cache")
    p = COST_PROMPT_TOKENS
    lesson06.show_cost_formula(ctx, p, cost_rows(p, COST_TABLE_N))
    one, resent = request_without_cache(ctx, ids[:p])
    steps = resend_steps(ids[:p], resent)
    lesson06.show_no_cache_requests(ctx, p, steps)
    compared = kvcache.cache_vs_no_cache(one.timings, one.tokens, steps)
    lesson06.show_cache_vs_no_cache(ctx, p, compared)

    # The same generation in numpy from the file's bytes: with a KV cache, and recomputing every prefix.
    ctx.step("the KV cache in numpy")
    lesson06.show_numpy_decode(ctx, generate_in_numpy(ctx, plan.numpy, ids[:p]), one.tokens)

    # What this run shows: what the cache saved, and how decode slowed with depth against the line's prediction.
    ctx.shows(*lesson06.shows(compared, depths, model, served))
    return ctx.finish()


# --- the plan: what this run asks, recorded once ---------------------------------------------

def the_plan(ctx: LessonContext) -> Plan:
    """The plan, recorded once as the host value `plan`. A run recorded before plans has none: the plan module
    reads its plan from the host values that run recorded (its numbered table of upgrades)."""
    samples = ctx.samples(MIN_SAMPLES)  # the run's rule: --repeat, and at least the lesson's minimum
    return ctx.plan(lambda: fresh_plan(ctx, samples).model_dump(mode="json"), read, from_older, READ_FROM)


def fresh_plan(ctx: LessonContext, samples: int) -> Plan:
    """This run's plan: the samples each timed request takes, and the file numpy generates from (by path and
    sha256) with the float32 bytes its weights take."""
    path = ctx.readable_model()
    numpy = NumpyFile(served=None, float32_bytes=None) if path is None else \
        NumpyFile(served=ctx.file_record(path), float32_bytes=4 * read_model_info(path)["n_params"])
    return fresh(samples, numpy)


# --- requests: what the server (and this host) answer ----------------------------------------

def model_facts(path) -> dict:
    """What this lesson needs from the GGUF (recorded as a host value)."""
    info = read_model_info(path)
    return {k: info[k] for k in ("name", "architecture", "file_type", "hyperparameters", "tensor_bytes")}


def request_cache_setup(ctx: LessonContext) -> CacheSetup:
    props = ctx.server.props().model_dump(mode="json")
    try:
        slots = ctx.server.slots()
    except BytesupError:  # /slots disabled (--no-slots)
        slots = None
    n_ctx = context_size(ctx.server)
    type_k, type_v, source = kvcache.kv_cache_types(props, slots, ctx.identity.get("server", {}).get("flags"))
    return CacheSetup(n_ctx=n_ctx, type_k=type_k, type_v=type_v, type_source=source)


def request_decode_at_depths(ctx: LessonContext, plan: Plan, ids: list[int],
                             depths: list[int]) -> list[tuple[int, list[Completion]]]:
    """DECODE_N tokens after a prompt of each depth (one token for depth 0), `plan.repeat` times each.

    One prefill of the deepest prompt, then every depth, deepest first, as a prefix of it through the prompt
    cache (cache_prompt true): the server keeps the shared prefix and evaluates only what is new, about one
    token, so the decode is the same decode after a context of that depth, without a prefill of its own. A plan
    without depths from the cache prefills every repeat (cache_prompt false, units.PINNED)."""
    n, repeat = DECODE_N, plan.repeat
    if not plan.depths_from_cache:
        return [(depth, timed_completions(ctx.server, ids[:max(depth, 1)], n, repeat,
                                          track=lambda r, depth=depth: ctx.track(r, f"depth {depth}"))) for depth in depths]
    ctx.server.completion(ids[:max(max(depths), 1)], **DEEPEST_PREFILL)  # the one prefill, not timed
    by_depth = {}
    for depth in sorted(set(depths), reverse=True):
        by_depth[depth] = timed_completions(ctx.server, ids[:max(depth, 1)], n, repeat, cache_prompt=True,
                                            track=lambda r, depth=depth: ctx.track(r, f"depth {depth} (from the cache)"))
    return [(depth, by_depth[depth]) for depth in depths]


def request_run_bandwidth(ctx: LessonContext) -> tuple[tuple[float | None, str | None],
                                                       tuple[float | None, str | None, str | None]]:
    """The run's bandwidth reading (GB/s, its median) where it bounds the server's decode, else None and why; and the
    last-level cache that reading recorded (bytes, where the size came from), else None and why."""
    facts = ctx.server_facts()
    if not facts["host_bandwidth_applies"]:
        why = f"this host's bandwidth does not bound the server's decode: {facts['reason']}"
        return (None, why), (None, None, why.replace("bandwidth", "cache", 1))
    reading = ctx.run_bandwidth_since()  # the run's one reading, shared by lessons 1, 4, 6, 7 and 8
    if reading is None:
        why = "this run was recorded without a reading of the host's bandwidth"
        return (None, why), (None, None, why + ", which carries its last-level cache size")
    llc = reading.get("llc_bytes")
    return (reading["gb_per_s"]["median"], None), (
        llc, reading.get("llc_source"), None if llc else "the OS reported no last-level cache size to this run")


def request_prompt_cache(ctx: LessonContext, plan: Plan, ids: list[int],
                         length: int) -> tuple[list[CacheRequest], stopping.Stop | None]:
    """Per round: the filler, then the same prompt twice with the cache on and twice with it off; `plan.repeat`
    rounds, or as many as the plan's stopping rule takes (and what stopped them). Last, the filler and the first
    round's prompt again (does another prompt clear the cache?)."""
    pool = sorted(set(ids))
    most = plan.cache_rounds.maximum if plan.cache_rounds is not None else plan.repeat
    # llama.cpp keeps earlier prompts in host memory and can restore them into the slot, so a prompt
    # seen before (in an earlier run against the same server) would not start cold: each repeat's
    # prompt begins with two tokens drawn at random for this run (a host value, so a replay is exact).
    leads = ctx.host("cold_prompt_leads", lambda: [random.SystemRandom().sample(pool, 2) for _ in range(most)])
    body = CACHE_BODY

    def timed(r: int, label: str, prompt: list[int], cache: bool) -> CacheRequest:
        t = ctx.server.completion(prompt, cache_prompt=cache, **body).timings
        return CacheRequest(r, label, cache, t.cache_n, t.prompt_n, t.prompt_ms)

    prompts: list[list[int]] = []

    def one_round(r: int, lead: list[int]) -> list[CacheRequest]:
        prompt = lead + ids[:length - 2]
        prompts.append(prompt)
        ctx.server.completion(FILLER_PROMPT, cache_prompt=True, **body)  # the slot now holds something else
        return [timed(r, label, prompt, cache) for label, cache in CACHE_REQUESTS]

    rounds = (one_round(r, lead) for r, lead in enumerate(ctx.track(leads, "prompt cache repeats"), start=1))
    stop = None
    if plan.cache_rounds is None:
        taken = list(rounds)
    else:  # rounds until the median time without the cache is tight (course.stopping), by the server's timings
        taken, stop = stopping.take(plan.cache_rounds.rule(), rounds, uncached_ms, prefill_seconds)
    done = [request for requests in taken for request in requests]
    ctx.server.completion(FILLER_PROMPT, cache_prompt=True, **body)
    done.append(timed(1, AGAIN, prompts[0], True))
    return done, stop


def uncached_ms(rounds: list[list[CacheRequest]]) -> list[list[float]]:
    """The figure the prompt cache test's rounds stop on: every time to the first token with cache_prompt false."""
    return [[r.prompt_ms for requests in rounds for r in requests if not r.cache_prompt]]


def prefill_seconds(requests: list[CacheRequest]) -> float:
    """A round's own time by the server's timings: its prompts' processing."""
    return sum(r.prompt_ms for r in requests) / 1000


def request_without_cache(ctx: LessonContext, prompt: list[int]) -> tuple[Completion, list[Completion]]:
    """COST_N tokens in one request, then one request per token re-sending the growing text."""
    one = ctx.server.completion(prompt, n_predict=COST_N, **RESEND_BODY)
    seq, resent = list(prompt), []
    for _ in ctx.track(range(COST_N), "re-sending the growing text"):
        done = ctx.server.completion(seq, n_predict=1, **RESEND_BODY)
        resent.append(done)
        seq = seq + done.tokens
    return one, resent


def generate_in_numpy(ctx: LessonContext, file: NumpyFile | None, prompt: list[int]) -> NumpyDecode | str | None:
    """NUMPY_N greedy tokens both ways, recomputed on every run and replay; each step's time is a host value. Or why
    numpy does not generate (None: a run recorded before it did)."""
    if file is None:
        return None
    if file.served is None or file.float32_bytes is None:
        return "The model file is not readable here (pass --model PATH.gguf), so numpy does not generate from it."
    if file.float32_bytes > NUMPY_MAX_FLOAT32_BYTES:
        return (f"numpy would hold {file.float32_bytes / GiB:.1f} GiB of float32 weights to generate from "
                f"{file.served['file']}, more than the {NUMPY_MAX_FLOAT32_BYTES / GiB:g} GiB this lesson allows "
                "itself, so it does not.")
    path = ctx.file_with(file.served)
    if path is None:
        return ctx.file_not_here(file.served, "numpy's generation")
    model = forward.Model(path, keep_blocks=True)
    for b in range(model.hp.n_layer):  # every block read, dequantized and widened to float64 first, so neither way's
        model.wide(b)                   # time includes the file
    model.output_wide()
    with ctx.timing_host():  # every step timed: this host's measurement in the lesson's time split
        cached = forward.greedy(model, prompt, NUMPY_N, cached=True)
        recomputed = forward.greedy(model, prompt, NUMPY_N, cached=False)
    ms = ctx.host("numpy_step_ms", lambda: {"cached": [1000 * t for t in cached.seconds],
                                            "recomputed": [1000 * t for t in recomputed.seconds]})
    return NumpyDecode(len(prompt), cached, recomputed, ms["cached"], ms["recomputed"])


# --- what the lesson records: measurements and facts ----------------------------------------------

def record_kv_cache(ctx: LessonContext, examples: list[KvExample], served: KvExample | None, info: dict | None,
                    setup: CacheSetup, readable: bool) -> None:
    """The served model's KV bytes per token (a measurement, and the bytes model's inputs in the settings), the
    examples as a fact, and the server's context and cache types."""
    if served is not None and info is not None:
        ctx.settings["bytes_model"] = {"weight_bytes": info["tensor_bytes"], "kv_bytes_per_token": served.per_token}
        ctx.measure("kv_bytes_per_token", "bytes", [served.per_token], higher_is_better=None,
                    settings={"cache_type_k": setup.type_k, "cache_type_v": setup.type_v},
                    description="2 × layers × KV heads × head width × bytes per element, from the GGUF")
    ctx.fact(KvExamples(examples))
    ctx.settings.update({"n_ctx": setup.n_ctx, "cache_type_k": setup.type_k, "cache_type_v": setup.type_v,
                         "cache_type_source": setup.type_source, "model_readable": readable})


def record_depths(ctx: LessonContext, depths: list[DepthResult]) -> None:
    for d in depths:
        ctx.measure("decode_tokens_per_s_at_depth", "tokens/s", d.tokens_per_s, higher_is_better=True,
                    settings={"depth": d.depth},
                    description="decode after a prompt of `depth` tokens (1 for depth 0)")


def record_depth_line(ctx: LessonContext, m: DepthModel) -> None:
    ctx.fact(DecodeAtDepth(
        t0_ms=m.line.t0_ms, slope_ms_per_position=m.line.slope_ms, fit_until=m.line.fit_until,
        tolerance=depthtime.TOLERANCE, held_out=[HeldOutDepth(depth=p.depth, error=p.error, spread=p.spread)
                                                 for p in m.held_out],
        bandwidth_gbs=m.split.bandwidth_gbs if m.split else None, kv_read_ms_per_position=m.split.kv_read_ms if m.split else None,
        cache_bytes=m.cache.cache_bytes if m.cache else None, knee=m.line.knee, slope2_ms_per_position=m.line.slope2_ms))


def record_prompt_cache(ctx: LessonContext, length: int, s: PromptCacheSummary) -> None:
    ctx.measure("ttft_ms_cached", "ms", s.cached_ms, higher_is_better=False, settings={"prompt_tokens": length},
                description="prompt_ms of the second identical request with cache_prompt true")
    ctx.measure("ttft_ms_uncached", "ms", s.uncached_ms, higher_is_better=False, settings={"prompt_tokens": length},
                description="prompt_ms with cache_prompt false")


# --- computation: typed records from the answers -----------------------------------------------

def depth_result(depth: int, runs: list[Completion], from_cache: bool = False) -> DepthResult:
    """ms per token = predicted_ms ÷ (predicted_n − 1) per repeat (the first token came with the prompt pass)."""
    return DepthResult(depth=depth, prompt_n=runs[0].timings.prompt_n,
                       ms_per_token=[decode_ms_per_token(c.timings) for c in runs],
                       tokens_per_s=[decode_tokens_per_s(c.timings) for c in runs],
                       prefill_median=None if from_cache else statistics.median(prefill_tokens_per_s(c.timings) for c in runs),
                       cache_n=[c.timings.cache_n for c in runs] if from_cache else None)


def kv_example(label: str, n_layer: int, n_head_kv: int, head_dim: int, cache_type: str, bytes_per_element: float,
               context: int, source: str) -> KvExample:
    """One row of the KV table: 2 × layers × KV heads × head width × bytes per element bytes per token."""
    return KvExample(label, n_layer, n_head_kv, head_dim, bytes_per_element,
                     formulas.kv_bytes_per_token(n_layer, n_head_kv, head_dim, bytes_per_element), cache_type, context,
                     source)


def worked_examples() -> list[KvExample]:
    """The published specimen at lesson 4's context, and the 70B example at the podcast's."""
    spec, big, element_bytes = kvcache.SPEC, kvcache.BIG, kvcache.element_bytes
    return [kv_example(f"{published.SPECIMEN_NAME} (published specimen)", spec["n_layer"], published.SPECIMEN_N_HEAD_KV,
                       spec["n_embd"] // spec["n_head"], "F16", element_bytes("f16"), published.LESSON4_CONTEXT_TOKENS,
                       "published; head width = width ÷ heads; lesson 4's context"),
            kv_example("70B example (published)", big["n_layer"], big["n_head_kv"], big["head_dim"], "F16",
                       big["bytes_per_element"], kvcache.PODCAST["context_tokens"], "published; the podcast's context")]


def served_example(info: dict, setup: CacheSetup, identity_name: str | None) -> KvExample:
    """The served model, from its GGUF hyperparameters and the server's cache types and context.
    K and V each hold half of the formula's 2, so a mixed cache costs the mean of their element bytes."""
    hp = info["hyperparameters"]
    name = info.get("name") or identity_name or "served model"
    elem = (kvcache.element_bytes(setup.type_k) + kvcache.element_bytes(setup.type_v)) / 2
    ctype = setup.type_k.upper() if setup.type_k == setup.type_v else f"K {setup.type_k.upper()}, V {setup.type_v.upper()}"
    return kv_example(f"{name} (served)", hp["n_layer"], hp["n_head_kv"], hp["head_dim"], ctype, elem, setup.n_ctx,
                      f"GGUF; cache type: {setup.type_source}; context: the server")


def specimen_shape() -> AttentionShape:
    """The published specimen's KV bytes per token and attention's shape (its worked example)."""
    spec = worked_examples()[0]
    return AttentionShape(spec.bytes_per_token, spec.n_layer, kvcache.SPEC["n_head"], spec.head_dim)


def attention_shape(served: KvExample | None, info: dict | None) -> AttentionShape | None:
    """The served model's KV bytes per token and attention's shape (None when its file is not readable here)."""
    if served is None or info is None:
        return None
    return AttentionShape(served.per_token, served.n_layer, info["hyperparameters"]["n_head"], served.head_dim)


def depth_line(depths: list[DepthResult], n_ctx: int, shape: AttentionShape | None,
               bandwidth: tuple[float | None, str | None],
               cache: tuple[float | None, str | None, str | None]) -> tuple[DepthModel | None, str | None]:
    """The line through the shallow half's decode steps, bent at the cache's knee where the depths past it show it,
    predicting the deeper depths; or why there is none."""
    try:
        return kvcache.depth_model(depths, n_ctx, shape, *bandwidth, specimen=specimen_shape(), cache=cache), None
    except ValueError as exc:
        return None, str(exc)


def cost_row(prompt: int, n: int) -> CostRow:
    return CostRow(n, n, WithAndWithout(kvcache.tokens_with_cache(prompt, n), kvcache.tokens_without_cache(prompt, n)),
                   WithAndWithout(kvcache.attention_pairs_with_cache(prompt, n), kvcache.attention_pairs_without_cache(prompt, n)))


def cost_rows(prompt: int, ns: tuple[int, ...]) -> list[CostRow]:
    return [cost_row(prompt, n) for n in ns]


def resend_steps(prompt: list[int], resent: list[Completion]) -> list[ResendStep]:
    steps, sent = [], len(prompt)
    for i, done in enumerate(resent, start=1):
        steps.append(ResendStep(i, sent, done.timings.prompt_n, done.timings.prompt_ms, done.tokens))
        sent += len(done.tokens)
    return steps


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
