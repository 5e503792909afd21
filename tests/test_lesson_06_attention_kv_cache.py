"""Lesson 6 replayed from its recorded run: KV cache arithmetic, decode vs depth, the prompt cache and
the cost of generating without a cache."""

from __future__ import annotations

import pytest

from bytesup.course import formulas
from bytesup.course import kvcache
from bytesup.course import published
from bytesup.check.checker import CACHE_TYPE_BYTES
from bytesup.errors import BytesupError
from bytesup.store.plans.lesson06 import COST_N, COST_PROMPT_TOKENS, NUMPY_LENGTHS, NUMPY_N, NumpyFile, fresh
from lessonkit import run_bandwidth

LESSON = "06_attention_kv_cache"


def rows(result, name):
    return result.table(name).rows


def line_notes(result) -> list[str]:
    """The depth line's notes in the order the view writes them: the fit (a formula, under Details), the held-out
    depths (the main table's), the slope split, the Spark's slope and the spread (formulas), and the knee (main)."""
    plain, formulas = result.table("decode_at_depth_line_main").notes, result.table("decode_at_depth_line").notes
    return [formulas[0], plain[0], formulas[1], formulas[2], plain[1], formulas[3]]


# --- KV cache size --------------------------------------------------------------------------

def test_kv_bytes_for_the_70b_example(result, lesson):
    big = next(r for r in rows(result, "kv_cache_size") if r[0].startswith("70B"))
    assert big[1:4] == [80, 8, 128]
    assert big[6] == 327_680 == published.KV_70B["bytes_per_token"]
    assert big[7] == 320.0
    assert big[6] / kvcache.PODCAST_KV_BYTES == 10.0
    assert big[8] == published.PODCAST_KV_70B["context_tokens"]


def test_podcast_notes_are_computed(result):
    notes = " ".join(result.table("kv_cache_size_main").notes)
    assert "10× too small (10.2× if KB means 1,000 bytes)" in notes
    # 30 × 32 KiB = 983,040 bytes: 0.938 MiB, 0.983 MB, so about the podcast's "one megabyte".
    assert "30 × its 32 KB = 0.938 MiB (0.983 MB), so it follows" in notes
    assert "30 tokens take 9.375 MiB" in notes
    assert "80 GiB of 70B KV cache (8 GiB by its own figure)" in notes
    assert not any("Podcast check" in n for n in result.notes)


def test_kv_bytes_for_the_course_model(result):
    course = next(r for r in rows(result, "kv_cache_size") if r[0].startswith(published.SPECIMEN_NAME))
    assert course[1:4] == [32, 32, 128]
    assert course[6] == 2 * 32 * 32 * 128 * 2 == 524_288
    assert course[8] == published.LESSON4_CONTEXT_TOKENS
    assert course[9] == pytest.approx(1024.0)  # MiB at 2,048 tokens


def test_kv_bytes_for_the_served_model_recompute(result, lesson):
    served = rows(result, "kv_cache_size")[0]
    hp = result.host_values["model_info"]["hyperparameters"]
    assert served[1:4] == [hp["n_layer"], hp["n_head_kv"], hp["head_dim"]]
    assert served[5] == CACHE_TYPE_BYTES[result.settings["cache_type_k"]]
    assert served[6] == 2 * served[1] * served[2] * served[3] * served[5]
    assert served[6] == formulas.kv_bytes_per_token(hp["n_layer"], hp["n_head_kv"], hp["head_dim"], served[5])
    assert served[8] == result.settings["n_ctx"]
    assert served[9] == pytest.approx(served[6] * served[8] / 2**20)
    assert result.measurement("kv_bytes_per_token").samples == [served[6]]


def test_context_size_comes_from_the_server(result, exchanges):
    props = next(e for e in exchanges if e["path"] == "/props")["response"]
    assert result.settings["n_ctx"] == props["default_generation_settings"]["n_ctx"]


# --- decode vs depth --------------------------------------------------------------------------

def test_depths_cover_the_context(result):
    table = rows(result, "decode_vs_depth")
    depths = [r[0] for r in table]
    n_ctx = result.settings["n_ctx"]
    assert len(depths) >= 5 and depths == sorted(depths) and depths[0] == 0
    assert depths[-1] >= n_ctx // 2 and depths[-1] < n_ctx
    assert table[0][1] == 1                      # depth 0: a one-token prompt
    if result.host_values.get("depths_from_cache"):
        # one prefill of the deepest prompt, then each depth as a prefix of it from the prompt cache: only
        # the last prompt position is processed again
        assert [r[1] for r in table[1:]] == [1] * (len(depths) - 1)
    else:
        assert [r[1] for r in table[1:]] == depths[1:]


def test_tokens_per_second_is_1000_over_ms_per_token(result):
    for depth, _, ms_med, ms, tps_med, lo, hi, tps, _ in rows(result, "decode_vs_depth"):
        assert tps == pytest.approx([1000.0 / m for m in ms])
        assert ms_med == pytest.approx(sorted(ms)[len(ms) // 2] if len(ms) % 2 else sum(sorted(ms)[len(ms) // 2 - 1:len(ms) // 2 + 1]) / 2)
        assert min(tps) == lo and max(tps) == hi and lo <= tps_med <= hi
        m = next(x for x in result.measurements
                 if x.name == "decode_tokens_per_s_at_depth" and x.settings["depth"] == depth)
        assert m.samples == pytest.approx(tps) and m.median == pytest.approx(tps_med)


# --- the prompt cache --------------------------------------------------------------------------

def test_second_cached_request_reuses_the_prompt(result):
    table = rows(result, "prompt_cache")
    first = [r for r in table if r[1] == "first, cache_prompt true"]
    second = [r for r in table if r[1] == "second, cache_prompt true"]
    off = [r for r in table if not r[2]]
    assert first and len(first) == len(second)
    assert all(r[3] == 0 for r in first)                 # started cold
    assert all(r[3] > 0 and r[3] + r[4] == first[0][4] for r in second)
    assert all(r[3] == 0 for r in off)                   # cache_prompt false never reuses
    assert result.measurement("ttft_ms_cached").samples == [r[5] for r in second]
    assert result.measurement("ttft_ms_uncached").samples == [r[5] for r in off]


def test_every_cache_request_pins_its_slot_and_sampling(exchanges):
    long = [e for e in exchanges if e["path"] == "/completion" and "id_slot" in e["request"]]
    assert long
    for e in long:
        req = e["request"]
        assert req["id_slot"] == 0 and req["temperature"] == 0 and "seed" in req and "cache_prompt" in req


# --- cost without a cache -------------------------------------------------------------------------

def test_no_cache_token_sum_is_the_arithmetic_series(result, lesson):
    steps = rows(result, "no_cache_requests")
    p, n = COST_PROMPT_TOKENS, COST_N
    assert [r[1] for r in steps] == [p + i for i in range(n)]
    assert [r[2] for r in steps] == [p + i for i in range(n)]      # each pass re-read the whole text
    assert sum(r[2] for r in steps) == n * p + n * (n - 1) // 2 == kvcache.tokens_without_cache(p, n)
    ways = rows(result, "cache_vs_no_cache")
    assert ways[0][2] == kvcache.tokens_with_cache(p, n)
    assert ways[1][2] == sum(r[2] for r in steps)
    assert ways[1][3] == pytest.approx(sum(r[3] for r in steps))


def test_no_cache_series_from_the_recorded_exchanges(exchanges, lesson):
    singles = [e for e in exchanges if e["path"] == "/completion" and e["request"].get("n_predict") == 1
               and e["request"].get("return_tokens")]
    assert len(singles) == COST_N
    for a, b in zip(singles, singles[1:], strict=False):  # each request re-sends the previous text plus its token
        assert b["request"]["prompt"] == a["request"]["prompt"] + a["response"]["tokens"]
    total = sum(e["response"]["timings"]["prompt_n"] for e in singles)
    p = len(singles[0]["request"]["prompt"])
    assert total == sum(p + i for i in range(COST_N))
    assert all(e["response"]["timings"]["cache_n"] == 0 for e in singles)


def test_cost_formula_table(result, lesson):
    p = COST_PROMPT_TOKENS
    for n, passes, w, wo, ratio, aw, awo, aratio in rows(result, "cost_formula"):
        assert passes == n and w == p + n - 1
        assert wo == sum(p + i - 1 for i in range(1, n + 1))
        assert ratio == pytest.approx(wo / w) and aratio == pytest.approx(awo / aw)


# --- pure helpers ---------------------------------------------------------------------------------


# --- without the model file or a context size -------------------------------------------------------

class _Server:
    """Just enough of a server for the KV table: /props with or without n_ctx, /slots disabled."""
    base_url = "http://gpu-box:8080"

    def __init__(self, n_ctx, slots=None):
        self.n_ctx, self._slots = n_ctx, slots

    def props(self):
        from bytesup.llama.responses import Props
        return Props(default_generation_settings={"n_ctx": self.n_ctx} if self.n_ctx else {})

    def slots(self):
        if self._slots is None:
            raise BytesupError("/slots is disabled")
        return self._slots


def _ctx(n_ctx, slots=None, model=None):
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions
    ctx = LessonContext(LESSON, "t", server=_Server(n_ctx, slots), run=RunOptions(command=[]), model_path=model,
                        sink=[], replay=None, progress=Reporter(None, LESSON))
    ctx.identity = {"server": {"flags": {}}}
    return ctx


def test_kv_bytes_of_the_published_70b_example_by_hand(lesson):
    # 2 (K and V) × 80 layers × 8 KV heads × 128 head width × 2 bytes (f16) = 327,680 bytes = 320 KiB
    big = lesson.worked_examples()[-1]
    assert (big.n_layer, big.n_head_kv, big.head_dim, big.bytes_per_element) == (80, 8, 128, 2)
    assert big.bytes_per_token == 327_680
    assert big.kib_per_token == 320
    # at the podcast's 4,096-token context: 327,680 × 4,096 bytes = 1,280 MiB
    assert big.context == 4096 and big.mib_at_context == 1280
    # the podcast's "32 KB" read as 32,768 bytes: 327,680 ÷ 32,768 = 10
    pod = kvcache.podcast_check(big.per_token)
    assert pod.ratio == 10
    # 64 requests × 4,096 tokens = 262,144 tokens
    assert pod.batch_tokens == 262_144


def test_kv_bytes_of_the_specimen_and_a_mixed_cache_by_hand(lesson):
    course = lesson.worked_examples()[0]
    # 2 × 32 × 32 × (4,096 ÷ 32 = 128) × 2 = 524,288 bytes; × 2,048 tokens = 1,024 MiB
    assert course.bytes_per_token == 524_288 and course.mib_at_context == 1024
    assert course.head_dim == 128 and type(course.head_dim) is int  # a whole width, shown as one
    info = {"name": "tiny", "hyperparameters": {"n_layer": 3, "n_head_kv": 2, "head_dim": 16, "n_head": 4}, "tensor_bytes": 10}
    # K in f16 (2 bytes) and V in q8_0 (34 bytes per 32 numbers): each holds half of the 2, so
    # 3 × 2 × 16 × (2 + 34/32) = 96 × 3.0625 = 294 bytes per token
    mixed = lesson.served_example(info, kvcache.CacheSetup(100, "f16", "q8_0", "server flags"), None)
    assert mixed.bytes_per_token == 294.0 and mixed.cache_type == "K F16, V Q8_0"
    assert mixed.context == 100 and mixed.label == "tiny (served)"
    # The fact states the shape and the bytes, as floats; the view's cache type, context and source are not stated.
    assert lesson.KvExamples([mixed]).model_dump(mode="json") == [
        {"label": "tiny (served)", "n_layer": 3, "n_head_kv": 2, "head_dim": 16, "bytes_per_element": (2 + 34 / 32) / 2,
         "bytes_per_token": 294.0}]
    # No name in the file: the server's name, else "served model".
    setup = kvcache.CacheSetup(100, "f16", "f16", "server flags")
    unnamed = {**info, "name": None}
    assert lesson.served_example(unnamed, setup, "llama").label == "llama (served)"
    assert lesson.served_example(unnamed, setup, None).label == "served model (served)"


def test_kv_table_without_the_model_file(lesson):
    from bytesup.store.views import lesson06

    ctx = _ctx(4096)
    setup = lesson.request_cache_setup(ctx)
    examples = lesson.worked_examples()
    lesson.record_kv_cache(ctx, examples, None, None, setup, False)
    lesson06.show_kv_cache_size(ctx, examples, None, None, setup)
    assert (setup.n_ctx, lesson.attention_shape(None, None)) == (4096, None)
    # Either part missing is enough for no shape: the served row without the file's hyperparameters, or the other way.
    served = lesson.served_example({"name": "tiny", "hyperparameters": {"n_layer": 3, "n_head_kv": 2, "head_dim": 16}},
                                   setup, None)
    assert lesson.attention_shape(served, None) is None
    assert lesson.attention_shape(None, {"hyperparameters": {"n_head": 4}}) is None
    table = ctx.tables[0]
    assert [r[0].split(" (")[0] for r in table.rows] == [published.SPECIMEN_NAME, "70B example"]
    assert any("not readable here" in n for n in table.notes)
    assert not any(m.name == "kv_bytes_per_token" for m in ctx.measurements)
    assert ctx.settings["model_readable"] is False
    assert [e["label"].split(" (")[0] for e in ctx.facts["kv_examples"]] == [published.SPECIMEN_NAME, "70B example"]


def test_no_context_size_is_a_clear_error(lesson):
    with pytest.raises(BytesupError, match="no context size"):
        lesson.request_cache_setup(_ctx(None, slots=[{"id": 0}]))


# --- the arithmetic by hand ---------------------------------------------------------------------------


def test_cost_rows_by_hand(lesson):
    row = lesson.cost_rows(16, (8,))[0]
    # with a cache: 16 + 8 − 1 = 23 positions; without: 16 + 17 + … + 23 = 156
    assert (row.positions.with_cache, row.positions.without) == (23, 156)
    # pairs with a cache: 16·17/2 = 136 for the prompt, then 17 + 18 + … + 23 = 140: 276
    # without: Σ (15 + i)(16 + i)/2 for i = 1…8 = 136 + 153 + 171 + 190 + 210 + 231 + 253 + 276 = 1,620
    assert (row.pairs.with_cache, row.pairs.without) == (276, 1620)


def test_decode_at_depth_divides_by_the_passes_after_the_first_token(lesson):
    from bytesup.llama.responses import Completion

    # 16 tokens in 150 ms: the first came with the prompt pass, so 15 decode passes of 10 ms, as the
    # server's own predicted_per_token_ms says (not 150 ÷ 16 = 9.375).
    runs = [Completion(content="", timings={"prompt_n": 8, "prompt_ms": 40.0, "predicted_n": 16, "predicted_ms": 150.0,
                                            "predicted_per_token_ms": 10.0}),
            Completion(content="", timings={"prompt_n": 8, "prompt_ms": 20.0, "predicted_n": 16, "predicted_ms": 300.0,
                                            "predicted_per_token_ms": 20.0})]
    d = lesson.depth_result(8, runs)
    assert d.ms_per_token == [c.timings.predicted_per_token_ms for c in runs] == [10.0, 20.0]
    assert d.tokens_per_s == [100.0, 50.0] and d.median == 75.0 and d.ms_median == 15.0
    # prefill: 8 tokens in 40 ms = 200 tokens/s, in 20 ms = 400 tokens/s; median 300
    assert d.prefill_median == 300.0
    # The depth's prompt length is the first repeat's (a later one may reuse a cached prefix: 2 tokens here).
    cached = Completion(content="", timings={"prompt_n": 2, "prompt_ms": 10.0, "predicted_n": 16, "predicted_ms": 150.0,
                                             "predicted_per_token_ms": 10.0})
    assert lesson.depth_result(8, [runs[0], cached]).prompt_n == 8


# --- main on hand-made answers -------------------------------------------------------------------------

N_CTX = 64
IDS = list(range(100, 148))          # 48 tokens of "corpus"
WEIGHTS = 1_000_000
HAND_INFO = {"name": "hand model", "architecture": "llama", "file_type": None, "tensor_bytes": WEIGHTS,
             "hyperparameters": {"n_layer": 2, "n_head_kv": 2, "head_dim": 8, "n_head": 4}}


# Where the hand-made server decodes: on this host's CPU, so the run's bandwidth reading bounds its decode.
HAND_FACTS = {"model_readable": True, "host_bandwidth_applies": True, "reason": "the server decodes on this host's CPU"}


def ms_per_token(prompt_n: int) -> float:
    """The hand-made server's decode cost: 8 ms + 0.25 ms per position already in the context."""
    return 8 + prompt_n / 4


class HandServer:
    """/completion answers computed from the request: decode costs ms_per_token(prompt_n) per pass after
    the first token; prefill 2 ms per position processed; one slot, plus a host-memory store of every
    prompt it has held (llama.cpp restores those)."""

    def __init__(self, cost=ms_per_token):
        self.slot: list | str | None = None
        self.seen: list = []
        self.cost = cost

    def __call__(self, body):
        prompt, n = body["prompt"], body["n_predict"]
        length = len(prompt) if isinstance(prompt, list) else 12
        cache_n = 0
        if body.get("cache_prompt") and (prompt == self.slot or prompt in self.seen):
            cache_n = length - 1
        if body.get("cache_prompt"):
            self.slot = prompt
            self.seen.append(prompt)
        prompt_n = length - cache_n
        per_token = self.cost(length)
        tokens = [(length * 7 + i) % 50 for i in range(n)] if isinstance(prompt, list) else [1] * n
        return {"content": "x" * n, "tokens": tokens,
                "timings": {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": 2.0 * prompt_n, "predicted_n": n,
                            "predicted_ms": per_token * (n - 1), "predicted_per_token_ms": per_token}}


@pytest.fixture
def hand_run(lesson):
    from lessonkit import QueuedServer, hand_context

    answer = HandServer()
    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 40})
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "server_facts": HAND_FACTS, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3],
        "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]]})
    result = lesson.main(ctx)
    return result, server


def test_main_on_hand_made_answers_kv_table(hand_run):
    result, server = hand_run
    # 2 × 2 layers × 2 KV heads × 8 head width × 2 bytes = 128 bytes per token
    served = result.fact("kv_examples")[0]
    assert served == {"label": "hand model (served)", "n_layer": 2, "n_head_kv": 2, "head_dim": 8,
                      "bytes_per_element": 2.0, "bytes_per_token": 128.0}
    assert [e["bytes_per_token"] for e in result.fact("kv_examples")[1:]] == [524_288.0, 327_680.0]
    assert result.measurement("kv_bytes_per_token").samples == [128.0]
    assert result.measurement("kv_bytes_per_token").settings == {"cache_type_k": "f16", "cache_type_v": "f16"}
    assert result.settings["bytes_model"] == {"weight_bytes": WEIGHTS, "kv_bytes_per_token": 128}
    # 128 bytes × 64 tokens = 8,192 bytes = 0.0078125 MiB
    assert result.table("kv_cache_size").rows[0][9] == 8192 / 2**20
    assert server.left() == {"/completion": 40 - 31}      # 10 decodes + 12 prompt-cache + 9 no-cache requests


def test_main_on_hand_made_answers_decode_vs_depth(hand_run):
    result, _ = hand_run
    # depths: 0, 0.125 × 64 = 8, 16, 32, then 48 and 59 both capped at 64 − 16 − 1 = 47
    depths = [m.settings["depth"] for m in result.measurements if m.name == "decode_tokens_per_s_at_depth"]
    assert depths == [0, 8, 16, 32, 47]
    speeds = {m.settings["depth"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s_at_depth"}
    # depth 0 is a one-token prompt: 8.25 ms per pass; depth 8: 10 ms → 100 tokens/s; depth 32: 16 ms → 62.5
    assert speeds[0] == [pytest.approx(1000 / 8.25)] * 2
    assert speeds[8] == [100.0, 100.0] and speeds[32] == [62.5, 62.5]
    # the bytes model: bandwidth = 121.21 tokens/s × 1,000,000 bytes; at depth 32 each token reads
    # 1,000,000 + 128 × 32 = 1,004,096 bytes
    bm = {r[0]: r for r in result.table("bytes_model_with_context").rows}
    assert bm[32][1] == 1_004_096
    assert bm[32][2] == pytest.approx(1000 / 8.25 * 1e6 / 1_004_096)
    assert bm[32][6] == pytest.approx(62.5 / (1000 / 8.25 * 1e6 / 1_004_096))


def test_main_on_hand_made_answers_prompt_cache_and_cost(hand_run):
    result, _ = hand_run
    # the prompt is 3/4 of 64 = 48 tokens: cold 48 positions × 2 ms = 96 ms; the repeat reuses 47 and processes 1 (2 ms)
    assert result.measurement("ttft_ms_cached").samples == [2.0, 2.0]
    assert result.measurement("ttft_ms_uncached").samples == [96.0] * 4
    again = result.table("prompt_cache").rows[-1]
    assert again[1].startswith("again") and again[3] == 47      # restored from the host-memory store
    assert "96 ms with cache_prompt false (medians): 48× faster" in " ".join(result.table("prompt_cache").notes)
    # re-sending: prompts of 16, 17, …, 23 tokens, 156 positions, 312 ms; one request: 16 + 7 = 23 positions
    steps = result.table("no_cache_requests").rows
    assert [r[2] for r in steps] == list(range(16, 24))
    ways = result.table("cache_vs_no_cache").rows
    assert (ways[0][2], ways[1][2]) == (23, 156)
    # one request: prompt 32 ms + 7 passes × (8 + 16/4 = 12 ms) = 116 ms; re-sent: 2 × 156 = 312 ms
    assert (ways[0][3], ways[1][3]) == (116.0, 312.0)


# --- the KV cache in numpy, from the file's bytes ---------------------------------------------------

@pytest.fixture(scope="module")
def _replayed(tmp_path_factory):
    """The recording replayed with its model file here (built the first time), so numpy's generation is recomputed."""
    from lessonkit import recorded_model, replay

    recorded_model(LESSON)
    return replay(LESSON, tmp_path_factory.mktemp("replay"))


def _numpy_flops(h: dict, prompt: int, n: int) -> tuple[int, int]:
    """FLOPs of n greedy tokens with the cache and recomputing, counted here step by step."""
    d, hd, heads, kv, ff, layers, vocab = (h["n_embd"], h["head_dim"], h["n_head"], h["n_head_kv"], h["n_ff"], h["n_layer"],
                                           h["n_vocab"])
    weights = layers * (d * hd * (2 * heads + 2 * kv) + 3 * d * ff)
    out = 2 * vocab * d

    def attended(first: int, last: int) -> int:  # positions first … last (1-based) each attend to that many
        return sum(range(first, last + 1))

    cached = 2 * weights * prompt + 4 * layers * heads * hd * attended(1, prompt) + out
    recomputed = cached
    for k in range(2, n + 1):
        length = prompt + k - 1
        cached += 2 * weights + 4 * layers * heads * hd * length + out
        recomputed += 2 * weights * length + 4 * layers * heads * hd * attended(1, length) + out
    return cached, recomputed


def test_numpy_counts_the_flops_of_both_ways(result, lesson):
    h = result.host_values["model_info"]["hyperparameters"]
    table = result.table("numpy_cache_vs_recompute")
    assert [r[0] for r in table.rows] == list(NUMPY_LENGTHS)
    for n, cached, recomputed, ratio, *_ in table.rows:
        assert (cached, recomputed) == _numpy_flops(h, COST_PROMPT_TOKENS, n)
        assert ratio == recomputed / cached
    # One token is one pass over the prompt either way; after that recomputing costs more every step.
    assert table.rows[0][1] == table.rows[0][2] and table.rows[-1][3] > table.rows[-2][3] > 1


def test_numpy_generates_the_same_tokens_both_ways_and_the_servers(result, lesson, exchanges):
    notes = result.table("numpy_cache_vs_recompute").notes
    assert notes[0].startswith(f"numpy generated {NUMPY_N} tokens greedily after the same "
                               f"{COST_PROMPT_TOKENS}-token prompt both ways: the same tokens, every logit the same "
                               "to the last bit")
    one = next(e for e in exchanges if e["path"] == "/completion" and e["request"].get("n_predict") == COST_N
               and e["request"].get("return_tokens"))
    assert len(one["request"]["prompt"]) == COST_PROMPT_TOKENS
    assert notes[3] == f"The server's own {COST_N} greedy tokens from this prompt (above) are numpy's first {COST_N}."


def test_numpy_times_are_the_recorded_ones(result, lesson):
    ms = result.host_values["numpy_step_ms"]
    assert len(ms["cached"]) == len(ms["recomputed"]) == NUMPY_N
    for n, *_, cached, recomputed, ratio in result.table("numpy_cache_vs_recompute").rows:
        assert cached == pytest.approx(sum(ms["cached"][:n])) and recomputed == pytest.approx(sum(ms["recomputed"][:n]))
        assert ratio == pytest.approx(recomputed / cached)
    plot = next(p for p in result.plots if p.name == "numpy_cache_vs_recompute")
    assert [s.x for s in plot.series] == [[float(n) for n in range(1, NUMPY_N + 1)]] * 2
    assert plot.series[1].y[-1] == pytest.approx(sum(ms["recomputed"]))


def test_a_model_too_large_for_numpys_float32_is_not_tried(hand_run, lesson):
    from lessonkit import QueuedServer, hand_context

    answer = HandServer()
    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 40})
    plan = {"served": {"file": "big.gguf", "path": "/nowhere/big.gguf", "sha256": "0" * 64}, "float32_bytes": 27 * 2**30}
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "server_facts": HAND_FACTS, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3],
        "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]], "numpy_plan": plan})
    result = lesson.main(ctx)
    assert result.notes[-1] == ("numpy would hold 27.0 GiB of float32 weights to generate from big.gguf, more than the "
                                "2 GiB this lesson allows itself, so it does not.")
    # A file small enough, but no file with its sha256 here: said, not taken from the recording.
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 40})
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "server_facts": HAND_FACTS, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3],
        "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]], "numpy_plan": {**plan, "float32_bytes": 2**20}})
    result = lesson.main(ctx)
    assert result.notes[-1].startswith("numpy's generation over big.gguf is not recomputed: no file with its recorded sha256")
    assert "numpy_cache_vs_recompute" not in [t.name for t in result.tables]
    # The hand-made run without a plan is one recorded before the numpy generation.
    assert hand_run[0].notes[-1] == ("This run was recorded before lesson 6 generated text in numpy, so that is not "
                                     "recomputed here.")


class PrefixCacheServer(HandServer):
    """The hand-made server with llama.cpp's prefix reuse: with cache_prompt true the slot keeps the longest
    shared prefix of what it held and evaluates the rest (at least the last token)."""

    def __call__(self, body):
        prompt = body["prompt"]
        if body.get("cache_prompt") and isinstance(prompt, list) and isinstance(self.slot, list):
            shared = 0
            while shared < min(len(prompt), len(self.slot)) and prompt[shared] == self.slot[shared]:
                shared += 1
            answer = super().__call__({**body, "cache_prompt": False})
            cache_n = min(shared, len(prompt) - 1)
            answer["timings"].update({"cache_n": cache_n, "prompt_n": len(prompt) - cache_n,
                                      "prompt_ms": 2.0 * (len(prompt) - cache_n)})
            self.slot = prompt + answer["tokens"]
            return answer
        answer = super().__call__(body)
        if body.get("cache_prompt") and isinstance(prompt, list):
            self.slot = prompt + answer["tokens"]
        return answer


def test_each_depth_comes_from_the_prompt_cache_with_the_same_decode(lesson):
    from lessonkit import QueuedServer, hand_context

    answer = PrefixCacheServer()
    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 40})
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "server_facts": HAND_FACTS, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3],
        "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]], "depths_from_cache": True})
    result = lesson.main(ctx)
    bodies = [b for _, path, b in server.requests if path == "/completion"]
    # One prefill of the deepest prompt (47 tokens), then the depths deepest first, each twice, from the cache.
    assert len(bodies[0]["prompt"]) == 47 and bodies[0]["n_predict"] == 1 and bodies[0]["cache_prompt"] is True
    assert [len(b["prompt"]) for b in bodies[1:11]] == [47, 47, 32, 32, 16, 16, 8, 8, 1, 1]
    assert all(b["cache_prompt"] for b in bodies[1:11])
    # The same decode as when every repeat prefilled: depth 8 at 10 ms a pass, depth 32 at 16 ms (see ms_per_token).
    speeds = {m.settings["depth"]: m.samples for m in result.measurements if m.name == "decode_tokens_per_s_at_depth"}
    assert list(speeds) == [0, 8, 16, 32, 47] and speeds[8] == [100.0, 100.0] and speeds[32] == [62.5, 62.5]
    table = result.table("decode_vs_depth")
    assert [r[1] for r in table.rows] == [1, 1, 1, 1, 1]  # prompt_n: one token evaluated at every depth
    assert [r[8] for r in table.rows] == [None] * 5       # no prefill worth timing
    note = result.table("decode_vs_depth_main").notes[-1]   # the plain words are the main table's
    assert note.startswith("Each depth's prompt came from the prompt cache: one prefill of the deepest, 47 tokens")
    assert "depth 47: 46, 46 reused, prompt_n 1" in note and "depth 8: 7, 7 reused, prompt_n 1" in note


# --- decode at depth: the line t(d) = t(0) + d × s, fitted on the shallow half ---------------------------

def test_depth_line_on_the_recording(result, lesson):
    """The recording's host has a 32 MiB last-level cache: d* = 33,554,432 ÷ 23,040 = 1,456 positions, between the
    fitted half's 1,024 and 1,536. So 1,536 is fitted too, and 1,904 is held out. The line through 0–1,024 (numpy's
    least squares) gives 1,536 more than measured, so the depths past d* did not show the knee: the model is one line,
    numpy's least squares through all five fitted depths, and every row is that line at its depth, set against the
    depth table's median; s is split at the run's bandwidth reading."""
    import numpy as np

    line = result.fact("decode_at_depth")
    measured = {r[0]: r[2] for r in rows(result, "decode_vs_depth")}
    llc = run_bandwidth(LESSON, result)["llc_bytes"]
    assert llc == 32 * 1024 * 1024 and line["cache_bytes"] == llc
    s1, t1 = np.polyfit([0, 256, 512, 1024], [measured[d] for d in (0, 256, 512, 1024)], 1)
    assert measured[1536] < t1 + s1 * 1536  # 14.63 ms against 16.84: −13.1%, no slower than the line below d*
    s, t0 = np.polyfit([0, 256, 512, 1024, 1536], [measured[d] for d in (0, 256, 512, 1024, 1536)], 1)
    assert (line["t0_ms"], line["slope_ms_per_position"]) == (pytest.approx(t0), pytest.approx(s))
    assert line["knee"] is None and line["slope2_ms_per_position"] is None
    table = result.table("decode_at_depth_line")
    assert [r[0] for r in table.rows] == list(measured) and line["fit_until"] == 1536
    for depth, ms, predicted_ms, predicted, tokens, error, spread, role in table.rows:
        assert ms == measured[depth] and tokens == pytest.approx(1000 / ms)
        assert predicted_ms == pytest.approx(t0 + s * depth)
        assert role == ("fitted" if depth <= 1536 else "held out") and (spread is None) == (depth <= 1536)
        assert predicted == pytest.approx(1000 / predicted_ms) and error == pytest.approx(100 * (ms / predicted_ms - 1))
    # 1,904 held out: 16.82 ms against the line's 17.26, −2.5%; the bent model's s₂ from 1,536 alone was −21.15 µs
    # per position and put 1,904 at 6.85 ms, +145.6% off
    assert [h["depth"] for h in line["held_out"]] == [1904] and line["tolerance"] == 0.15
    assert round(100 * line["held_out"][0]["error"], 1) == -2.5 and line["held_out"][0]["spread"] < 0.15
    assert line_notes(result)[1] == ("Held out, predicted by a model not fitted on them: 1 of 1 depths within ±15% of "
                                     "measured; the worst, depth 1,904, at -2.5%.")
    gbs = run_bandwidth(LESSON, result)["gb_per_s"]["median"]
    assert line["bandwidth_gbs"] == pytest.approx(gbs)
    assert line["kv_read_ms_per_position"] == pytest.approx(23040 / (gbs * 1e9) * 1e3)
    assert line_notes(result)[2].startswith(f"At the run's bandwidth reading, {gbs:.3g} GB/s (median), one position's "
                                     "23,040 bytes of K and V take")
    assert line_notes(result)[4].startswith("The knee: the run's last-level cache, 32 MiB (") and line_notes(result)[4].endswith(
        "holds the K and V of d* = 33,554,432 ÷ 23,040 bytes per position = 1,456 positions, between depths 1,024 and "
        "1,536: below it a token's K and V reads can come from the cache, beyond it they no longer fit and may come from "
        "memory. Against the line through the depths below d* (0, 256, 512, 1,024), depth 1,536 took 14.63 ms per token "
        f"where the line gives {t1 + s1 * 1536:.4g} ms (-13.1%, the prediction's spread ±5%): no slower than the line "
        "through the shallower ones, so the KV cache leaving the last-level cache did not show in this run, and the "
        "model is one line through every fitted depth.")
    plot = next(p for p in result.plots if p.name == "decode_vs_depth")
    marker, fitted = plot.series[-1], plot.series[-2]
    assert marker.x == [pytest.approx(llc / 23040)] * 2 and marker.label.startswith("d* = 1,456")
    assert fitted.x == [0, 256, 512, 1024, 1536, 1904]  # the line is not bent at d*


@pytest.fixture(scope="module")
def committed_run(tmp_path_factory):
    """Lesson 6 of the committed 2026-12-01 run, replayed from its recordings (the golden test checks every file)."""
    import json
    from pathlib import Path

    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons
    from bytesup.store.results import load_result

    run = Path(__file__).resolve().parents[1] / "outputs" / "2026-12-01-cpu2-smollm2"
    out = tmp_path_factory.mktemp("committed") / "replay"
    assert run_lessons([LESSON], RunOptions(replay=run, out=out, command=["test"])) == 0
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    return load_result(json.loads((out / f"{LESSON}.json").read_text(encoding="utf-8")), LESSON), manifest


def test_depth_line_on_the_committed_run(committed_run):
    """The line against numpy's least squares on the same points, the held-out depths within ±15%, and the KV read at
    the run's bandwidth reading."""
    import numpy as np

    result, manifest = committed_run
    line = result.fact("decode_at_depth")
    depths = rows(result, "decode_vs_depth")
    fitted = [(r[0], r[2]) for r in depths if r[0] <= 1024]
    assert [d for d, _ in fitted] == [0, 256, 512, 1024]
    slope, t0 = np.polyfit([d for d, _ in fitted], [ms for _, ms in fitted], 1)
    assert line["t0_ms"] == pytest.approx(t0) and line["slope_ms_per_position"] == pytest.approx(slope)
    # 1,536 and 1,904 held out: -3.4% and -6.2%
    for held in line["held_out"]:
        ms = next(r[2] for r in depths if r[0] == held["depth"])
        assert held["error"] == pytest.approx(ms / (t0 + slope * held["depth"]) - 1)
        assert abs(held["error"]) <= 0.15
    assert [round(100 * h["error"], 1) for h in line["held_out"]] == [-3.4, -6.2]
    # 23,040 bytes of K and V per position at the manifest's 21.36 GB/s: 1.079 µs, 12.5% of s = 8.598 µs
    gbs = manifest["host_bandwidth"]["before"]["gb_per_s"]["median"]
    assert line["bandwidth_gbs"] == gbs
    assert line["kv_read_ms_per_position"] == pytest.approx(23_040 / (gbs * 1e9) * 1e3)
    assert line["kv_read_ms_per_position"] / slope == pytest.approx(0.1255, abs=1e-4)
    notes = line_notes(result)
    assert notes[1] == ("Held out, predicted by a model not fitted on them: 2 of 2 depths within ±15% of measured; "
                        "the worst, depth 1,904, at -6.2%.")
    # its host's 260 MiB cache holds the K and V of 272,629,760 ÷ 23,040 = 11,833 positions: no knee, the line
    assert line["cache_bytes"] == manifest["host_bandwidth"]["before"]["llc_bytes"] == 272_629_760
    assert line["knee"] is None and line["slope2_ms_per_position"] is None
    assert notes[4].endswith("= 11,833 positions, beyond the deepest depth, 1,904: every depth's K and V fit in the cache, "
                             "so the model is the line.")
    assert "23,040 bytes of K and V take 1.08 µs to read: 13% of s. The rest, 7.52 µs" in notes[2]
    assert "= 69,120 FLOPs" in notes[2] and notes[2].endswith("at 9.19 GFLOP/s. Here s is mostly attention's work.")


def test_main_on_hand_made_answers_depth_line(hand_run):
    result, _ = hand_run
    # depths 0, 8, 16, 32 fitted (half of 64), at 8.25, 10, 12, 16 ms: x̄ = 14, ȳ = 11.5625,
    # Σ(x − x̄)(y − ȳ) = 136.5, Σ(x − x̄)² = 560: s = 0.24375 ms, t(0) = 11.5625 − 0.24375 × 14 = 8.15 ms
    line = result.fact("decode_at_depth")
    assert (line["t0_ms"], line["slope_ms_per_position"], line["fit_until"]) == (
        pytest.approx(8.15), pytest.approx(0.24375), 32)
    # depth 47 held out: 8.15 + 47 × 0.24375 = 19.606 ms against 8 + 47 ÷ 4 = 19.75 measured: +0.73%
    # every repeat answers the same step, so no depth scatters and the prediction's spread is 0
    assert line["held_out"] == [{"depth": 47, "error": pytest.approx(19.75 / 19.60625 - 1), "spread": 0.0}]
    table = result.table("decode_at_depth_line")
    assert [r[7] for r in table.rows] == ["fitted"] * 4 + ["held out"]
    assert table.rows[-1][:3] == [47, 19.75, pytest.approx(19.60625)]
    assert line_notes(result)[0].startswith("The least-squares line through the median ms per token at the depths up to half "
                                     "the context (0, 8, 16, 32): t(0) = 8.15 ms and s = 243.8 µs per earlier position")
    assert line_notes(result)[1] == ("Held out, predicted by a model not fitted on them: 1 of 1 depths within ±15% of measured; "
                              "the worst, depth 47, at +0.7%.")
    assert line_notes(result)[4] == ("No knee is placed, so the model is the line: this run was recorded without a reading of "
                              "the host's bandwidth, which carries its last-level cache size.")
    # hand_context gives no bandwidth reading: a replay of a run that recorded none
    assert line_notes(result)[2] == ("The KV read is not split out of s: this run was recorded without a reading of the "
                              "host's bandwidth.")
    plot = next(p for p in result.plots if p.name == "decode_vs_depth")
    assert plot.series[-1].y[-1] == pytest.approx(1000 / 19.60625)


def _hand_depth_run(lesson, facts: dict, bandwidth: dict | None, plan: dict | None = None, cost=ms_per_token):
    from lessonkit import QueuedServer, hand_context

    answer = HandServer(cost)
    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 40})
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, bandwidth=bandwidth,
                       host_values={"server_facts": facts, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3],
                                    "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]],
                                    **({"plan": plan} if plan is not None else {})})
    return lesson.main(ctx)


def test_the_hand_made_slope_split_at_the_runs_bandwidth(lesson):
    result = _hand_depth_run(lesson, HAND_FACTS, {"gb_per_s": {"median": 12.8, "min": 12.0, "max": 13.0}})
    # 128 bytes of K and V per position at 12.8 GB/s: 1e-8 s = 0.01 µs, 0.0041% of s = 243.75 µs; the rest,
    # 243.74 µs, does 4 × 2 layers × 4 heads × 8 = 256 FLOPs: 256 ÷ 243.74e-6 s = 0.00105 GFLOP/s
    line = result.fact("decode_at_depth")
    assert line["bandwidth_gbs"] == 12.8 and line["kv_read_ms_per_position"] == pytest.approx(1e-5)
    assert line_notes(result)[2] == (
        "At the run's bandwidth reading, 12.8 GB/s (median), one position's 128 bytes of K and V take 0.01 µs to read: "
        "0.0041% of s. The rest, 244 µs, is attention's work per position: 4 × 2 layers × 4 heads × 8 = 256 FLOPs "
        "(q·k and V's weighted sum, 2 each per element), at 0.00105 GFLOP/s. Here s is mostly attention's work.")
    assert line_notes(result)[3].endswith(
        "there s is mostly the KV read, here mostly attention's work (0.0041% the KV read).")


def test_the_hand_made_knee_from_the_runs_cache(lesson):
    """A 2,560-byte last-level cache holds the K and V of 2,560 ÷ 128 = 20 positions: d* = 20, between 16 and 32.
    t(0) and s₁ through (0, 8.25), (8, 10), (16, 12): x̄ = 8, ȳ = 10.0833, Σ(x − x̄)(y − ȳ) = 14.667 + 15.333 = 30,
    Σ(x − x̄)² = 128, s₁ = 0.234375 ms, t(0) = 10.0833 − 1.875 = 8.2083; s₂ through 32 (16 ms): (16 − 8.2083 −
    0.234375 × 20) ÷ 12 = 0.258681 ms; 47 predicted at 12.8958 + 0.258681 × 27 = 19.8802 ms against 19.75 measured:
    19.75 ÷ 19.8802 − 1 = −0.65%."""
    result = _hand_depth_run(lesson, HAND_FACTS, {"gb_per_s": {"median": 12.8}, "llc_bytes": 2560,
                                                   "llc_source": "hand"})
    line = result.fact("decode_at_depth")
    assert (line["knee"], line["cache_bytes"], line["fit_until"]) == (20, 2560, 32)
    assert (line["t0_ms"], line["slope_ms_per_position"], line["slope2_ms_per_position"]) == (
        pytest.approx(8.208333), pytest.approx(0.234375), pytest.approx(0.2586806))
    assert line["held_out"] == [{"depth": 47, "error": pytest.approx(19.75 / 19.8802083 - 1, abs=1e-8), "spread": 0.0}]
    table = result.table("decode_at_depth_line")
    assert table.title.startswith("Decode at depth d: t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*), d* = 20")
    assert line_notes(result)[0].startswith("t(0) = 8.208 ms and s₁ = 234.4 µs per earlier position by least squares through "
                                     "the median ms per token at the depths up to d* (0, 8, 16); s₂ = 258.7 µs per "
                                     "position beyond it, through the fitted depths past d* (32)")
    # 32 came at 16 ms against the line below d*'s 8.2083 + 0.234375 × 32 = 15.7083: +1.86%, and the samples do not
    # scatter, so the knee shows
    assert line_notes(result)[4] == ("The knee: the run's last-level cache, 0 MiB (hand), holds the K and V of d* = 2,560 ÷ 128 "
                              "bytes per position = 20 positions, between depths 16 and 32: below it a token's K and V "
                              "reads can come from the cache, beyond it they no longer fit and may come from memory. "
                              "Against the line through the depths below d* (0, 8, 16), depth 32 took 16 ms per token "
                              "where the line gives 15.71 ms (+1.9%, the prediction's spread ±0%): slower by more than "
                              "that spread, so the knee shows in this run, and past d* the model takes s₂ = 258.7 µs per "
                              "position.")
    # the KV read at 12.8 GB/s: 0.01 µs, 0.0043% of s₁ = 234.4 µs and 0.0039% of s₂ = 258.7 µs, which exceeds s₁ by
    # 24.3 µs, 2,400 × that read
    assert "0.0043% of s₁" in line_notes(result)[2] and line_notes(result)[2].endswith(
        "Beyond d*, the same read is 0.0039% of s₂ = 259 µs; s₂ − s₁ = +24.3 µs per position is 2.4e+03× the KV read at "
        "the bandwidth.")
    plot = next(p for p in result.plots if p.name == "decode_vs_depth")
    assert plot.series[-1].x == [20, 20] and plot.series[-2].x == [0, 8, 16, 20, 32, 47]


def flat_past_20(prompt_n: int) -> float:
    """A decode cost that grows a fifth as fast past 20 positions: 8 ms + 0.25 ms per position up to 20, 0.05 beyond."""
    return 8 + min(prompt_n, 20) / 4 + 0.05 * max(0, prompt_n - 20)


def test_the_hand_made_knee_the_run_does_not_show(lesson):
    """The same cache, d* = 20, on a server whose cost per position falls past 20: 32 came at 13 + 0.6 = 13.6 ms against
    the line below d*'s 15.7083, −13.4%, so the model is one line through 0, 8, 16 and 32 (8.25, 10, 12, 13.6 ms): x̄ =
    14, ȳ = 10.9625, Σ(x − x̄)(y − ȳ) = 37.975 + 5.775 + 2.075 + 47.475 = 93.3, Σ(x − x̄)² = 560, s = 0.16661 ms, t(0) =
    10.9625 − 14 s = 8.63 ms; 47 (13 + 1.35 = 14.35 ms) predicted at 8.63 + 47 s = 16.4607: −12.8%."""
    result = _hand_depth_run(lesson, HAND_FACTS, {"gb_per_s": {"median": 12.8}, "llc_bytes": 2560, "llc_source": "hand"},
                             cost=flat_past_20)
    s = 93.3 / 560
    line = result.fact("decode_at_depth")
    assert (line["knee"], line["slope2_ms_per_position"], line["cache_bytes"], line["fit_until"]) == (None, None, 2560, 32)
    assert (line["t0_ms"], line["slope_ms_per_position"]) == (pytest.approx(10.9625 - 14 * s), pytest.approx(s))
    assert line["held_out"] == [{"depth": 47, "error": pytest.approx(14.35 / (10.9625 + 33 * s) - 1), "spread": 0.0}]
    assert round(100 * line["held_out"][0]["error"], 1) == -12.8
    table = result.table("decode_at_depth_line")
    assert table.title.startswith("Decode at depth d: t(d) = t(0) + d × s, fitted up to depth 32")
    assert [r[7] for r in table.rows] == ["fitted"] * 4 + ["held out"]
    notes = line_notes(result)
    assert notes[0].startswith("The least-squares line through the median ms per token at every fitted depth, below and "
                               "past d* (0, 8, 16, 32): t(0) = 8.63 ms and s = 166.6 µs per earlier position")
    assert notes[4].endswith(
        "may come from memory. Against the line through the depths below d* (0, 8, 16), depth 32 took 13.6 ms per token "
        "where the line gives 15.71 ms (-13.4%, the prediction's spread ±0%): no slower than the line through the "
        "shallower ones, so the KV cache leaving the last-level cache did not show in this run, and the model is one "
        "line through every fitted depth.")
    assert "Beyond d*" not in notes[2]  # no s₂ to split
    assert ("a line through the depths up to 32 gives t(0) = 8.63 ms and s = 166.6 µs per earlier position, not bent at "
            "d* = 20, which the depths past it did not show, and predicted 1 of the 1 deeper depth within") in result.shows.text
    plot = next(p for p in result.plots if p.name == "decode_vs_depth")
    assert plot.series[-1].x == [20, 20] and plot.series[-2].x == [0, 8, 16, 32, 47]  # d* marked, the line not bent


def test_a_fresh_plan_decodes_halfway_past_the_knee(lesson):
    """A cache of 40 × 128 bytes: d* = 40, between half the 64-token context and the deepest depth, 47. The plan adds
    int((40 + 47) ÷ 2) = 43 (8 + 43 ÷ 4 = 18.75 ms), which fixes s₂, and 47 stays held out."""
    plan = fresh(2, NumpyFile(served=None, float32_bytes=None)).model_dump(mode="json")
    result = _hand_depth_run(lesson, HAND_FACTS, {"gb_per_s": {"median": 12.8}, "llc_bytes": 40 * 128}, plan)
    assert [r[0] for r in rows(result, "decode_vs_depth")] == [0, 8, 16, 32, 43, 47]
    assert result.table("decode_vs_depth_main").notes[0].startswith(
        "Depths are fractions of the 64-token context, except 43, halfway from d* = 40 (where the K and V fill the run's "
        "last-level cache) to the deepest depth")
    line = result.fact("decode_at_depth")
    assert (line["knee"], line["fit_until"], [h["depth"] for h in line["held_out"]]) == (40, 43, [47])
    # a plan recorded before version 4 keeps the fractions: the same cache, no depth 43
    older = _hand_depth_run(lesson, HAND_FACTS, {"gb_per_s": {"median": 12.8}, "llc_bytes": 40 * 128}, {**plan, "version": 3})
    assert [r[0] for r in rows(older, "decode_vs_depth")] == [0, 8, 16, 32, 47]
    # s₁ and t(0) through 0, 8, 16 and 32 (8.25, 10, 12, 16 ms): x̄ = 14, ȳ = 11.5625, s₁ = 136.5 ÷ 560 = 0.24375,
    # t(0) = 8.15; s₂ = (18.75 − 8.15 − 0.24375 × 40) ÷ 3 = 0.2833; 47: 17.9 + 0.2833 × 7 = 19.883 against 19.75
    assert line["slope2_ms_per_position"] == pytest.approx((18.75 - 8.15 - 0.24375 * 40) / 3)
    assert line["held_out"][0]["error"] == pytest.approx(19.75 / (8.15 + 0.24375 * 40 + 7 * (18.75 - 17.9) / 3) - 1)


def test_no_slope_split_where_the_hosts_bandwidth_does_not_apply(lesson):
    elsewhere = {**HAND_FACTS, "host_bandwidth_applies": False, "reason": "the server runs on another host"}
    result = _hand_depth_run(lesson, elsewhere, {"gb_per_s": {"median": 12.8}})
    line = result.fact("decode_at_depth")
    assert line["bandwidth_gbs"] is None and line["kv_read_ms_per_position"] is None
    assert line["slope_ms_per_position"] == pytest.approx(0.24375)  # the line and its predictions still show
    notes = line_notes(result)
    assert notes[2] == ("The KV read is not split out of s: this host's bandwidth does not bound the server's decode: "
                        "the server runs on another host.")
    assert notes[3].endswith("there s is mostly the KV read.")


def test_no_slope_split_without_the_model_file(lesson):
    result = _hand_depth_run(lesson, {**HAND_FACTS, "model_readable": False}, {"gb_per_s": {"median": 12.8}})
    assert "bytes_model_with_context" not in [t.name for t in result.tables]
    notes = line_notes(result)
    assert notes[2] == ("The KV read is not split out of s: the served model's file is not readable here, so its KV "
                        "bytes per token and heads are unknown.")
    assert result.fact("decode_at_depth")["held_out"][0]["depth"] == 47


def test_a_recorded_plan_is_read_as_it_is(lesson):
    """A run recorded with a plan replays from it alone: its repeat (not the host value `repeat`), depths from the
    cache, and no numpy file."""
    from lessonkit import QueuedServer, hand_context

    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [PrefixCacheServer()] * 40})
    plan = fresh(2, NumpyFile(served=None, float32_bytes=None)).model_dump(mode="json")
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "server_facts": HAND_FACTS, "model_info": HAND_INFO, "load_average": [0.5, 0.4, 0.3], "repeat": 7,
        "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143]], "plan": plan})
    result = lesson.main(ctx)
    bodies = [b for _, path, b in server.requests if path == "/completion"]
    assert [len(b["prompt"]) for b in bodies[:11]] == [47, 47, 47, 32, 32, 16, 16, 8, 8, 1, 1]
    assert "2 repeats per depth" in " ".join(result.table("decode_vs_depth_main").notes)
    assert result.notes[-1] == "The model file is not readable here (pass --model PATH.gguf), so numpy does not generate from it."


def test_the_published_70b_row_shows_its_whole_bytes_and_states_a_float(lesson):
    """One record for the KV figure: the table shows the published 2 bytes per element as given, the fact states 2.0."""
    from bytesup.store.views import page

    big = lesson.worked_examples()[-1]
    heads, rows = page.by_columns(type(big), ["bytes_per_element", "bytes_per_token", "kib_per_token"], [big],
                                  {"bytes_per_token": int})
    assert heads == [("bytes per element", ""), ("per token", "bytes"), ("per token", "KiB")]
    assert rows == [[2, 327_680, 320.0]] and type(rows[0][0]) is int and type(rows[0][1]) is int
    assert lesson.KvExamples([big]).model_dump(mode="json")[0]["bytes_per_element"] == 2.0
    assert lesson.specimen_shape() == kvcache.AttentionShape(524_288, 32, 32, 128)


def _notes_of_numpy_decode(cached_logits: list[list[float]], recomputed_logits: list[list[float]]) -> list[str]:
    """show_numpy_decode's notes for a hand-made generation of len(logits) tokens whose two ways give these logits."""
    import numpy as np

    from bytesup.course.kvcache import NumpyDecode
    from bytesup.models.forward import Generation
    from bytesup.store.views import lesson06

    n = len(cached_logits)
    way = [Generation(tokens=[7] * n, logits=[np.array(x, dtype=np.float32) for x in logits], seconds=[0.01] * n,
                      flops=[100 * (i + 1) for i in range(n)]) for logits in (cached_logits, recomputed_logits)]
    d = NumpyDecode(prompt_n=4, cached=way[0], recomputed=way[1], cached_ms=[1.0] * n, recomputed_ms=[2.0] * n)
    tables: list = []

    class Page:
        def table(self, name, title, columns, rows, notes=None):
            tables.append(notes)

        def note(self, text):
            tables.append([text])

        def plot(self, *args, **kw):
            pass

    lesson06.show_numpy_decode(Page(), d, [7] * n)
    return tables[0]


def test_numpy_decode_says_the_two_ways_agree_to_the_bit_only_when_they_do(monkeypatch):
    from bytesup.store.views import lesson06

    monkeypatch.setattr(lesson06, "NUMPY_N", 16)
    monkeypatch.setattr(lesson06, "NUMPY_LENGTHS", (8, 16))
    same = [[0.5, -1.25]] * 16
    assert "every logit the same to the last bit" in _notes_of_numpy_decode(same, same)[0]
    moved = [[0.5, -1.25]] * 15 + [[0.5, -1.2500305]]  # one logit a float32 step or so away
    first = _notes_of_numpy_decode(same, moved)[0]
    assert "the same to the last bit" not in first and "every logit within 3.1e-05: the same sums, added in another order" in first


# --- what this run shows, and the main tables -------------------------------------------------------------------

def test_what_the_run_shows_reads_the_recording(result):
    """The fixture's opening: the cache-versus-no-cache table's positions and times, the depths' medians, the served
    model's KV bytes and the depth model's fact, each as the records hold it."""
    ways = result.table("cache_vs_no_cache").rows
    (_, _, with_n, with_ms, _), (_, _, without_n, without_ms, _) = ways
    assert (with_n, without_n) == (23, 156)
    depths = rows(result, "decode_vs_depth")
    line = result.fact("decode_at_depth")
    per_token = int(result.fact("kv_examples")[0]["bytes_per_token"])
    held = line["held_out"]
    assert [h["depth"] for h in held] == [1904] and abs(held[0]["error"]) <= 0.15
    assert result.shows.plot == "decode_vs_depth"
    assert result.shows.text == (
        f"Generating {COST_N} tokens with the KV cache processed {with_n} positions in {with_ms:.4g} ms; "
        f"re-sending the growing text without it processed {without_n} ({without_n / with_n:.3g}× as many) in "
        f"{without_ms:.4g} ms ({without_ms / with_ms:.3g}× the time). "
        f"Decode slowed from {depths[0][4]:.4g} tokens/s at depth 0 to {depths[-1][4]:.4g} at depth 1,904, each "
        f"earlier position adding {per_token:,} bytes of K and V to read; a line through the depths up to "
        f"{line['fit_until']:,} gives t(0) = {line['t0_ms']:.4g} ms and s = {1e3 * line['slope_ms_per_position']:.4g} µs "
        f"per earlier position, not bent at d* = {line['cache_bytes'] / per_token:,.0f}, which the depths past it did "
        f"not show, and predicted 1 of the 1 deeper depth within ±15% of measured (the furthest, depth 1,904, by "
        f"{100 * held[0]['error']:+.1f}%).")
    assert held[0]["spread"] < 0.15
    # by hand: 23 and 156 positions, 81.9 and 374.8 ms
    assert "processed 23 positions in 81.9 ms" in result.shows.text and "(6.78× as many)" in result.shows.text


def test_main_tables_are_at_most_eight_columns_and_narrow_their_full_tables(result):
    main = [t for t in result.tables if not t.detail]
    assert main and all(len(t.columns) <= 8 for t in main), [(t.name, len(t.columns)) for t in main]
    for name in ("kv_cache_size", "decode_vs_depth", "decode_at_depth_line"):
        narrow, full = result.table(f"{name}_main"), result.table(name)
        assert full.detail and not narrow.detail and len(full.columns) > len(narrow.columns)
        heads = [(c.name, c.unit) for c in full.columns]
        at = [heads.index((c.name, c.unit)) for c in narrow.columns]
        assert narrow.rows == [[row[i] for i in at] for row in full.rows]
    # the formulas sit with the full tables, the plain words with the main ones
    assert result.table("kv_cache_size").title.startswith("KV cache bytes per token = 2 × layers")
    assert not any("=" in n for n in result.table("kv_cache_size_main").notes[:1])
    assert result.table("decode_vs_depth").notes == [
        "tokens/s = 1000 ÷ ms per token, sample by sample; the median, min and max are of those samples."]
    # the depth line's formula and its fit, slope split and spread under Details; held out and the knee in the main text
    assert result.table("decode_at_depth_line").title.startswith("Decode at depth d: t(d) = t(0) + d × s")
    assert "t(d)" not in result.table("decode_at_depth_line_main").title
    assert result.table("decode_at_depth_line_main").notes[0].startswith("Held out, predicted by a model not fitted")
    assert result.table("decode_at_depth_line").notes[0].startswith("The least-squares line through ")
    # the samples columns only under Details
    assert ("decode samples", "tokens/s") not in [(c.name, c.unit) for c in result.table("decode_vs_depth_main").columns]


def _hand_shows(ms: list[float], resent_ms: float = 312.0, fit_until: int = 64):
    """view.shows on hand-made records: 8 tokens after a 16-token prompt in one request (prompt 32 ms + 7 passes of 12
    ms) against 8 re-sent requests of 16…23 positions taking `resent_ms` in all; and depths 0, 16, 32, 48, 64, 96, 112
    with median ms per token `ms` (two equal repeats)."""
    from types import SimpleNamespace

    from bytesup.course.kvcache import DepthResult, cache_vs_no_cache, depth_model
    from bytesup.store.facts.lesson06 import KvExample, ResendStep
    from bytesup.store.views import lesson06

    timings = SimpleNamespace(prompt_n=16, prompt_ms=32.0, predicted_n=8, predicted_ms=84.0, predicted_per_token_ms=12.0,
                              cache_n=0)
    steps = [ResendStep(i + 1, 16 + i, 16 + i, resent_ms / 8, [i]) for i in range(8)]
    c = cache_vs_no_cache(timings, list(range(8)), steps)
    at = [0, 16, 32, 48, 64, 96, 112]
    depths = [DepthResult(d, 1, [m, m], [1000 / m, 1000 / m], None) for d, m in zip(at, ms, strict=True)]
    served = KvExample("hand (served)", 2, 2, 8, 2, 128.0)
    spec = kvcache.AttentionShape(524_288, 32, 32, 128)
    model = depth_model(depths, 2 * fit_until, None, None, "no reading", spec, (None, None, "no cache"))
    return lesson06, c, depths, model, served


def test_what_the_run_shows_follows_hand_made_records():
    # t(d) = 10 + d ÷ 16 ms on every depth: the line through 0…64 predicts 96 and 112 exactly
    view, c, depths, model, served = _hand_shows([10 + d / 16 for d in (0, 16, 32, 48, 64, 96, 112)])
    text, plot = view.shows(c, depths, model, served)
    assert plot == "decode_vs_depth"
    # with the cache: 16 + 7 = 23 positions, 32 + 84 = 116 ms; without: 16 + … + 23 = 156 positions, 312 ms
    assert text == ("Generating 8 tokens with the KV cache processed 23 positions in 116 ms; re-sending the growing text "
                    "without it processed 156 (6.78× as many) in 312 ms (2.69× the time). Decode slowed from 100 "
                    "tokens/s at depth 0 to 58.82 at depth 112, each earlier position adding 128 bytes of K and V to "
                    "read; a line through the depths up to 64 gives t(0) = 10 ms and s = 62.5 µs per earlier position, "
                    "and predicted 2 of the 2 deeper depths within ±15% of measured (the furthest, depth 96, by +0.0%).")
    # the deep depths twice as slow as the line says: the same line, and it predicts neither
    ms = [10 + d / 16 for d in (0, 16, 32, 48, 64)] + [2 * (10 + 96 / 16), 2 * (10 + 112 / 16)]
    view, c, depths, model, served = _hand_shows(ms)
    text, _ = view.shows(c, depths, model, served)
    # predicted 1000 ÷ 16 = 62.5 tokens/s at depth 96 against 31.25 measured: +100%
    assert text.endswith("and predicted 0 of the 2 deeper depths within ±15% of measured (the furthest, depth 96, by "
                         "+100.0%).")
    # decode faster at depth than at 0, re-sending no slower, no depth model and no served model's bytes
    view, c, depths, _, _ = _hand_shows([20, 19, 18, 17, 16, 15, 10], resent_ms=100.0)
    text, _ = view.shows(c, depths, None, None)
    assert text == ("Generating 8 tokens with the KV cache processed 23 positions in 116 ms; re-sending the growing text "
                    "without it processed 156 (6.78× as many) in 100 ms (0.862× the time). Decode sped up from 50 "
                    "tokens/s at depth 0 to 100 at depth 112.")


# --- the prompt cache test's rounds under a stopping rule (plan version 5) -----------------------------------------

class ScatteredServer(HandServer):
    """HandServer, its prefills without the cache taking 1, 1.5, 0.7, … times as long in turn."""

    def __init__(self, factors):
        super().__init__()
        self.factors = list(factors)

    def __call__(self, body):
        answer = super().__call__(body)
        if body.get("id_slot") == 0 and body.get("cache_prompt") is False:
            answer["timings"]["prompt_ms"] *= self.factors.pop(0)
        return answer


def _cache_rounds(lesson, answer):
    from lessonkit import QueuedServer, hand_context

    from bytesup.store.plans.lesson06 import NumpyFile, fresh

    props = {"default_generation_settings": {"n_ctx": N_CTX}}
    server = QueuedServer({"/props": [props, props], "/slots": [[{"id": 0, "n_ctx": N_CTX}]],
                           "/tokenize": [{"tokens": IDS}], "/completion": [answer] * 50})
    plan = fresh(3, NumpyFile(served=None, float32_bytes=None)).model_dump(mode="json")
    ctx = hand_context(LESSON, server, identity={"server": {"flags": {}}, "model": {"name": "hand"}}, host_values={
        "plan": plan, "samples": 3, "server_facts": HAND_FACTS, "model_info": HAND_INFO,
        "load_average": [0.5, 0.4, 0.3], "cpu_count": 2, "cold_prompt_leads": [[140, 141], [142, 143], [144, 145]]})
    return lesson.main(ctx)


def test_steady_prefills_stop_the_prompt_cache_test_after_one_round(lesson):
    # Without the cache the 48-token prompt (3/4 of the context) takes 2 ms a position, 96 ms both times: known exactly
    # after one round, whose own time is three such prefills and the cached one's single position, 290 ms.
    result = _cache_rounds(lesson, HandServer())
    assert [r[0] for r in result.table("prompt_cache").rows] == [1, 1, 1, 1, 1]  # one round, then the first again
    assert result.settings["prompt_cache_stopped"] == {"samples": 1, "stopped_by": "tight", "median_uncertainty": 0.0,
                                                       "spent_s": 0.29}
    assert result.measurement("ttft_ms_uncached").samples == [96.0, 96.0]
    assert ("The prompt cache test took 1 round: the stopping rule stopped it once its medians were known within ±10% "
            "(at ±0%), at its minimum. Each round times the prompt twice without the cache.") in result.notes


def test_scattered_prefills_take_every_round_the_run_allows(lesson):
    result = _cache_rounds(lesson, ScatteredServer([1.0, 1.5, 0.7, 1.2, 1.0, 1.3]))
    assert [r[0] for r in result.table("prompt_cache").rows] == [1] * 4 + [2] * 4 + [3] * 4 + [1]
    stop = result.settings["prompt_cache_stopped"]
    assert (stop["samples"], stop["stopped_by"]) == (3, "maximum")
    assert any(n.startswith("The prompt cache test took 3 rounds, the stopping rule's maximum") for n in result.notes)
