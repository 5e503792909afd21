"""The run against itself across lessons: one quantity, measured by several lessons, must come out the same.

Two quantities of the run's default model (the model the run's server serves):

- its decode speed at one sequence after a short prompt, measured by lesson 4 (after its short prompt), lesson 5
  (its latency fit, and on the client's clock the gaps of its streamed tokens), lesson 5b (the model alone, without
  speculation), lesson 6 (at depth 0), lesson 7 (P = 1) and lesson 8 (the sweep's default model);
- its prefill of a 128-token prompt, measured by lesson 8 (the default model's prefill) and lesson 7 (the prefill it
  places on its roofline: a table, not a measurement, so read from its recorded answers, its warm-up left out).

Every figure is read from the raw records: each lesson's measurements with their samples and settings, and where a
lesson keeps none, its recorded /completion answers. The arithmetic is check's own. Each sample becomes a time per
token (ms per decode step, ms per prompt token), so that a speed and a time per token agree sample by sample. A
lesson's figure is the median of its samples; its spread the interquartile range of its samples over their median
(quartiles by linear interpolation between the sorted samples); the pooled spread the median of the spreads of the
lessons with at least MIN_SAMPLES samples: each lesson one voice however many samples it holds, and one lesson whose
samples scatter widely cannot widen every lesson's tolerance. The client's gaps between streamed tokens are left out
of the pool: each is one step as it reached the client, not a request's mean over its steps, and single steps
scatter more than means of thirty.
Each lesson is set against the median of every lesson's figure (with two lessons, against the other one's): one
lesson that is off shifts a median of three or more by one rank at most, so it cannot drag the figure the others
are judged by. A lesson agrees within the pooled spread, and never within less than ±DRIFT_TOLERANCE: the pooled
spread is how the samples of one lesson scatter over a few seconds, while the lessons take their samples minutes
apart, and over minutes a shared machine's speed moves by more than its samples scatter in one burst (on a 2-core
machine, lesson 8's prefill 3.8% above lesson 7's, four minutes later, where each lesson's own samples scattered by
1%). ±DRIFT_TOLERANCE is also all a lesson with too few samples to say what its spread is (fewer than MIN_SAMPLES,
or fewer than two lessons with that many) is held to.

Where the run read the machine's pace before and after every lesson (bytesup.run.pace: the same short decode on the
run's server, three times each), the least tolerance is also what the machine's own speed did over the run, where it
exceeds ±DRIFT_TOLERANCE: how far the readings' medians lie from their median, the furthest but one (`wander`). No
lesson can be told apart from another by less than the machine wandered between them. The claim's observation is the
lesson furthest from the lessons' median, so the machine is measured the same way: its furthest reading, less one so
that a single reading cannot widen the tolerance. The interquartile range of the readings, used before, is the
middle half of them, and the furthest of seven lessons lies past the middle half of a machine's wander most of the
time: in two make runs of 2026-12-06 on a 2-core AMD EPYC the pace's medians ranged from 105 to 167 and from 102 to
149 tokens/s, their spreads 19.0% and 10.0%, and each run failed one lesson at −29.7% and +12.7% (the first, a
median of two samples, 72 and 118 tokens/s); the furthest but one lay 22.0% and 16.5% from the median. On such a
machine the claim cannot see a gap smaller than that, and says so in its tolerance. On a 2-core virtual machine the
pace's medians also ranged from 102 to 181 tokens/s in one run, minutes apart and seconds apart, with no other
process here using the cores, while lessons measured with three samples each; ±10% there failed one lesson a run, a
different one each time. Setting the figures in units of each lesson's own pace instead did not bring them closer:
three samples of a pace scatter as much as three of a lesson. The prefill claim is held to the wander of the pace's
prefills, which are arithmetic where decode is memory, where the run read them (before that, to the decodes').

The pace's prefill is the very quantity the prefill claim compares: the default model's prompt of about 128 tokens on
the run's server, timed by the server. So each lesson's prefill can also be set against the pace read just before
and just after it (its bracket). On a 2-core virtual machine the prefill moved in steps: each lesson's samples lay
within 2% of each other while lesson 7 read 352 tokens/s and lesson 8, minutes later, 312, and the pace read 318
before lesson 7, 343 after it and 314 after lesson 8 (runs of 2026-12-05; a server of lesson 8's shape beside one
of the run's, in turns, differed by 1.5%). A gap between lessons past the tolerance is then INCONCLUSIVE where every
lesson it sets apart lies within the tolerance of its own bracket (`beyond_bracket`): the machine moved by as much
around them, and the lessons cannot be told from it. It stays a FAIL where one of them lies further from the pace
read around it, or where no pace was read. The pace's decode times 16 tokens where the lessons time 32 to 128, a
different quantity (in a make run of 2026-12-05 the pace's median was 106.8 tokens/s, the lessons' 97.0), so the
decode claim sets both in shares: a lesson's figure ÷ the lessons' reference, against the pace read around it
(`decode_brackets`) ÷ the pace around the lessons it is judged against (`reference_pace`, taken over the readings as
the reference takes their figures). The pace's median over the whole run is no such yardstick where the lessons ran in
another spell than most of its readings: in a make run on a 2-core AMD EPYC on 2026-12-06 the pace read 139 to 146
tokens/s around lessons 4 to 7, 144 and 170 around lesson 8, and 165 to 171 around the rest; lesson 8 decoded at
161 tokens/s, +18.6% from the lessons' median. Against the run's pace median of 165 its bracket was 0.87× to 1.03×,
+15.1% beyond, a fail; against the pace around the lessons it was judged against, 1.00× to 1.18×: +0.7% beyond,
within the tolerance.

A lesson the machine was busy for (bytesup.course.busy) is set aside, named with the reason, and the quiet lessons
are judged against each other (`set_busy_aside`): its figure is the machine's under that load, and one busy lesson
made the whole claim inconclusive, hiding whether the quiet ones agreed. On a 2-core AMD EPYC on 2026-12-06 lesson 8,
the longest, was busy in 6 of 14 make runs, in 5 of them by the memory bandwidth read 29% to 78% apart before and
after its decode work. With fewer than two quiet readings left, nothing is set aside and the claim is inconclusive
as a whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bytesup.course import busy
from bytesup.check.claims.common import L4, L5, L5B, L6, L7, L8, busy_during, grouped, unless_busy
from bytesup.check.evidence import RawCompletion, exchanges_path, recorded_completions
from bytesup.check.verdicts import FAIL, INCONCLUSIVE, ITSELF, NA, PASS, ClaimResult, find_lesson, missing
from bytesup.errors import BytesupError
from bytesup.store.plans import lesson08
from bytesup.store.results import LessonResult, Measurement
from bytesup.store.runs import Run

MIN_SAMPLES = 5  # fewer samples cannot say what their spread is
DRIFT_TOLERANCE = 0.10  # at least: lessons minutes apart on one machine (see the module)
MIN_PACES = 4  # pace readings needed for the machine's wander (a quartile of fewer is one reading)
PREFILL_TOKENS = 128

# The settings of a server shape, in the order they are named.
SERVER, ENGINE, CONTEXT, SLOTS, TURNS, N_PREDICT, CLOCK = ("server", "engine", "-c", "--parallel", "turns", "n_predict",
                                                           "clock")
SHAPE_ORDER = (SERVER, ENGINE, CONTEXT, SLOTS, TURNS, N_PREDICT, CLOCK)
NAMED_BY_VALUE = (SERVER, TURNS, CLOCK)  # shown by their value alone: "a server of its own", "alone"
RUNS_SERVER, OWN_SERVER = "the run's server", "a server of its own"
SERVER_CLOCK, CLIENT_CLOCK = "the server's timings", "the client's arrivals (streamed)"


# --- check's own arithmetic --------------------------------------------------------------------------

def median(values: list[float] | tuple[float, ...]) -> float:
    xs = sorted(values)
    if not xs:
        raise ValueError("a median needs at least one value")
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def quantile(values: list[float] | tuple[float, ...], q: float) -> float:
    """The q-quantile by linear interpolation between the sorted values (position q × (n − 1))."""
    xs = sorted(values)
    if not xs:
        raise ValueError("a quantile needs at least one value")
    at = q * (len(xs) - 1)
    low = math.floor(at)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (at - low)


def relative_spread(values: list[float] | tuple[float, ...]) -> float:
    """(Q3 − Q1) ÷ median: the spread of one lesson's samples, as a fraction of its figure."""
    m = median(values)
    return (quantile(values, 0.75) - quantile(values, 0.25)) / m if m else 0.0


def pooled_spread(spreads: list[float]) -> float | None:
    """The median of the lessons' spreads; None with fewer than two (one lesson cannot be pooled)."""
    if len(spreads) < 2:
        return None
    return median(spreads)


# --- what each lesson measured ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One lesson's measurement of the quantity: its samples as ms per token, and the shape it was measured on."""
    label: str                       # "04", "05 streamed", "07 at P = 1"
    lesson_id: str
    source: str                      # the measurement (or the recorded answers) it is read from
    ms: tuple[float, ...]            # ms per token, one per sample
    shape: dict[str, str] = field(default_factory=dict)
    pooled: bool = True              # its spread joins the pooled spread (not single steps: the client's gaps)

    @property
    def figure_ms(self) -> float:
        return median(self.ms)

    @property
    def tokens_per_s(self) -> float:
        return 1e3 / self.figure_ms

    @property
    def enough(self) -> bool:
        return len(self.ms) >= MIN_SAMPLES

    @property
    def spread(self) -> float:
        return relative_spread(self.ms)


def _ms(samples: list[float], unit: str) -> tuple[float, ...]:
    """Samples as ms per token: a speed (tokens/s) inverted, a time (ms) as it is; samples ≤ 0 left out."""
    if unit.strip().lower() == "ms":
        return tuple(float(v) for v in samples if v > 0)
    return tuple(1e3 / v for v in samples if v > 0)


def _measured(lesson: LessonResult, name: str, **settings: Any) -> Measurement | None:
    for m in lesson.measurements:
        if m.name == name and all(m.settings.get(k) == v for k, v in settings.items()):
            return m
    return None


def default_model(run: Run) -> str | None:
    """The name of the model the run's server serves, as its lessons record it."""
    names = [str(r.model["name"]) for r in run.results.values() if r.model.get("name")]
    if names:
        return max(set(names), key=names.count)
    file = run.model_identity().get("file")
    return Path(str(file)).stem if file else None


def server_identity(lesson: LessonResult) -> tuple[str, ...]:
    """The run's server as the lesson recorded it: engine, build and flags (its port and model among them)."""
    server = lesson.server or {}
    flags = server.get("flags") or {}
    return (str(server.get("engine", "")), str(server.get("build", "")),
            *(f"{k}={v}" for k, v in sorted(flags.items())))


def runs_server_shape(lesson: LessonResult) -> dict[str, str]:
    """The run's server: its engine and build, its context and slots from its flags (where it records them)."""
    server = lesson.server or {}
    flags = server.get("flags") or {}
    shape = {SERVER: RUNS_SERVER}
    engine = " ".join(str(server[k]) for k in ("engine", "build") if server.get(k))
    if engine:
        shape[ENGINE] = engine
    context = flags.get("--ctx-size", flags.get("-c"))
    if context is not None:
        shape[CONTEXT] = str(context)
    slots = flags.get("--parallel", flags.get("-np"))
    if slots is not None:
        shape[SLOTS] = str(slots)
    return shape


def _turns(completions: list[RawCompletion], server: str) -> str | None:
    """The other servers whose requests came between this server's first and last (servers up at the same time, the
    requests going round them in turns), counted; None when the server answered nothing."""
    lines = [c.line for c in completions if c.server == server]
    if not lines:
        return None
    others = sorted({c.server for c in completions if c.server != server and lines[0] < c.line < lines[-1]})
    return "alone" if not others else f"in turns with {len(others)} other server{'s' if len(others) > 1 else ''}"


def _with_exchanges(run: Run, lesson: LessonResult, shape: dict[str, str], server: str) -> dict[str, str]:
    path = exchanges_path(run, lesson)
    turns = _turns(recorded_completions(path), server) if path is not None else None
    return {**shape, TURNS: turns} if turns else shape


def _decode_l4(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    m = _measured(lesson, "decode_tokens_per_s_short_prompt")
    if m is None:
        return []
    shape = {**runs_server_shape(lesson), CLOCK: SERVER_CLOCK}
    if m.settings.get("n_predict") is not None:
        shape[N_PREDICT] = str(m.settings["n_predict"])
    return [Reading("04", lesson.lesson_id, m.name, _ms(m.samples, m.unit), _with_exchanges(run, lesson, shape, "main"))]


def _decode_l5(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    out = []
    for name, label, clock in (("decode_ms_per_token", "05", SERVER_CLOCK), ("client_itl_ms", "05 streamed", CLIENT_CLOCK)):
        m = _measured(lesson, name)
        if m is None:
            continue
        shape = {**runs_server_shape(lesson), CLOCK: clock}
        if m.settings.get("n_predict") is not None:
            shape[N_PREDICT] = str(m.settings["n_predict"])
        out.append(Reading(label, lesson.lesson_id, m.name, _ms(m.samples, m.unit), _with_exchanges(run, lesson, shape, "main"),
                           pooled=clock == SERVER_CLOCK))
    return out


def _decode_l5b(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    """The default model decoding alone (no speculation) on the server lesson 5b started for it."""
    m = _measured(lesson, "spec_model_decode_tokens_per_s", model=model)
    if m is None:
        m = _measured(lesson, "spec_decode_tokens_per_s", target=model, spec_type="none", prompt="short")
    if m is None:
        return []
    spec = lesson.settings.get("speculative") or {}
    shape = {SERVER: OWN_SERVER}
    engine = spec.get("engine") if isinstance(spec, dict) else None
    if isinstance(engine, dict) and engine.get("engine"):
        shape[ENGINE] = " ".join(str(engine[k]) for k in ("engine", "build") if engine.get(k))
    if isinstance(spec, dict) and spec.get("ctx_size") is not None:
        shape[CONTEXT] = str(spec["ctx_size"])
    n_predict = m.settings.get("n_predict", spec.get("n_predict") if isinstance(spec, dict) else None)
    if n_predict is not None:
        shape[N_PREDICT] = str(n_predict)
    shape[CLOCK] = SERVER_CLOCK
    return [Reading("05b", lesson.lesson_id, f"{m.name} of {model}", _ms(m.samples, m.unit),
                    _with_exchanges(run, lesson, shape, f"spec-{model}"))]


def _decode_l6(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    m = _measured(lesson, "decode_tokens_per_s_at_depth", depth=0)
    if m is None:
        return []
    shape = {**runs_server_shape(lesson), CLOCK: SERVER_CLOCK}
    return [Reading("06 at depth 0", lesson.lesson_id, m.name, _ms(m.samples, m.unit),
                    _with_exchanges(run, lesson, shape, "main"))]


def _decode_l7(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    m = _measured(lesson, "batch_per_sequence_decode_tokens_per_s", parallel=1)
    if m is None:
        return []
    s = lesson.settings
    if s.get("own_servers"):
        shape, server = {SERVER: OWN_SERVER, SLOTS: "1"}, "parallel-1"
        if isinstance(s.get("ctx_per_slot"), int):
            shape[CONTEXT] = str(s["ctx_per_slot"])  # lesson 7 gives each of its P slots ctx_per_slot: -c ctx_per_slot × P
    else:
        shape, server = runs_server_shape(lesson), "main"
    if s.get("batch_n_predict") is not None:
        shape[N_PREDICT] = str(s["batch_n_predict"])
    shape[CLOCK] = SERVER_CLOCK
    return [Reading("07 at P = 1", lesson.lesson_id, m.name, _ms(m.samples, m.unit), _with_exchanges(run, lesson, shape, server))]


def lesson08_plan(lesson: LessonResult) -> lesson08.Plan | None:
    """The plan lesson 8 recorded (or, for a run before plans, the one it followed); None when it cannot be read."""
    try:
        return lesson08.read_plan({k: lesson.host_values[k] for k in lesson08.PLAN_READS if k in lesson.host_values})
    except (BytesupError, ValueError, KeyError, TypeError):
        return None


def _own_server_08(lesson: LessonResult) -> dict[str, str]:
    shape = {SERVER: OWN_SERVER}
    plan = lesson08_plan(lesson)
    if plan is not None:
        shape[CONTEXT], shape[SLOTS] = str(plan.context), str(plan.slots)
    return shape


def _decode_l8(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    m = _measured(lesson, "decode_tokens_per_s", preset=model)
    if m is None:
        return []
    local = lesson.settings.get("local")
    shape = _own_server_08(lesson) if local else runs_server_shape(lesson)
    if lesson.settings.get("n_predict") is not None:
        shape[N_PREDICT] = str(lesson.settings["n_predict"])
    shape[CLOCK] = SERVER_CLOCK
    return [Reading("08", lesson.lesson_id, f"{m.name} of {model}", _ms(m.samples, m.unit),
                    _with_exchanges(run, lesson, shape, f"preset-{model}" if local else "main"))]


def _prefill_l7(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    """Lesson 7's timed prefill of the run's server: its answers to a prompt of token ids, one token generated, none
    of the prompt cached; the plan's warm-ups (recorded as the host value `plan` or, before plans, `prefill_plan`)
    left out. A run whose lesson 7 recorded no such plan timed no prefill."""
    plan = lesson.host_values.get("plan")
    prefill = plan.get("prefill") if isinstance(plan, dict) else lesson.host_values.get("prefill_plan")
    path = exchanges_path(run, lesson)
    if not isinstance(prefill, dict) or not prefill.get("samples") or path is None:
        return []
    answers = [c for c in recorded_completions(path) if c.server == "main" and isinstance(c.request.get("prompt"), list)
               and c.request.get("n_predict") == 1 and c.timings and c.timings.get("prompt_n") == PREFILL_TOKENS
               and not c.timings.get("cache_n")]
    ms = tuple(float(c.timings["prompt_ms"]) / PREFILL_TOKENS for c in answers[int(prefill.get("warmup", 0)):]
               if c.timings and isinstance(c.timings.get("prompt_ms"), (int, float)) and c.timings["prompt_ms"] > 0)
    if int(prefill.get("tokens", 0)) != PREFILL_TOKENS or not ms:
        return []
    shape = {**runs_server_shape(lesson), CLOCK: SERVER_CLOCK}
    return [Reading("07", lesson.lesson_id, f"the prefills of {PREFILL_TOKENS} token ids in {path.name}", ms,
                    _with_exchanges(run, lesson, shape, "main"))]


def _prefill_l8(run: Run, lesson: LessonResult, model: str | None) -> list[Reading]:
    m = _measured(lesson, "prefill_tokens_per_s", preset=model, prompt_tokens=PREFILL_TOKENS)
    if m is None:
        return []
    local = lesson.settings.get("local")
    shape = {**(_own_server_08(lesson) if local else runs_server_shape(lesson)), CLOCK: SERVER_CLOCK}
    return [Reading("08", lesson.lesson_id, f"{m.name} of {model}", _ms(m.samples, m.unit),
                    _with_exchanges(run, lesson, shape, f"preset-{model}" if local else "main"))]


Reader = Callable[[Run, LessonResult, str | None], list[Reading]]

# (lesson prefix, lesson name, what it measures, reader)
DECODE: list[tuple[str, str, str, Reader]] = [
    ("04_", L4, "decode_tokens_per_s_short_prompt", _decode_l4),
    ("05_", L5, "decode_ms_per_token or client_itl_ms", _decode_l5),
    ("05b_", L5B, "spec_model_decode_tokens_per_s of the default model", _decode_l5b),
    ("06_", L6, "decode_tokens_per_s_at_depth at depth 0", _decode_l6),
    ("07_", L7, "batch_per_sequence_decode_tokens_per_s at P = 1", _decode_l7),
    ("08_", L8, "decode_tokens_per_s of the default model", _decode_l8),
]
PREFILL: list[tuple[str, str, str, Reader]] = [
    ("07_", L7, f"timed prefill of {PREFILL_TOKENS} tokens", _prefill_l7),
    ("08_", L8, f"prefill_tokens_per_s of the default model at {PREFILL_TOKENS} tokens", _prefill_l8),
]


def readings(run: Run, readers: list[tuple[str, str, str, Reader]]) -> tuple[list[Reading], list[str]]:
    """Every lesson's readings, and for each lesson without one why it is not applicable."""
    model = default_model(run)
    found, absent = [], []
    for prefix, name, what, read in readers:
        lesson = find_lesson(run, prefix)
        if lesson is None:
            absent.append(missing(run, prefix, name))
            continue
        got = [r for r in read(run, lesson, model) if r.ms]
        if not got:
            absent.append(f"lesson {lesson.lesson_id} recorded no {what}")
        found += got
    return found, absent


def set_busy_aside(run: Run, found: list[Reading], absent: list[str]) -> tuple[list[Reading], list[str]]:
    """The readings of lessons the machine was quiet for, and `absent` with a line for each lesson set aside because
    the machine was busy while it measured (bytesup.course.busy). A busy lesson's figure is the machine's under
    that load, not the lesson's; the quiet lessons can still be set against each other. Where fewer than two
    readings would be left, nothing is set aside, and the claim as a whole is inconclusive (`unless_busy`)."""
    why = {r.lesson_id: busy_during(run, r.lesson_id) for r in found}
    quiet = [r for r in found if why[r.lesson_id] is None]
    if len(quiet) < 2 or len(quiet) == len(found):
        return found, absent
    aside = [f"{r.label}: set aside, the machine was busy {why[r.lesson_id]}" for r in found if r not in quiet]
    return quiet, absent + aside


# --- the verdict ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    reading: Reading
    reference_ms: float     # the figure it is judged against (see reference_ms)
    tolerance: float

    @property
    def deviation(self) -> float:
        """This lesson's speed against the reference: reference ms ÷ its ms − 1 (+0.33: 1.33× faster)."""
        return self.reference_ms / self.reading.figure_ms - 1

    def within(self, ms: float) -> bool:
        """Whether a time per token of `ms` lies within the tolerance of the reference."""
        return abs(self.reference_ms / ms - 1) <= self.tolerance * (1 + 1e-12)

    @property
    def agrees(self) -> bool:
        return self.within(self.reading.figure_ms)

    @property
    def one_sample_apart(self) -> float | None:
        """A figure of two samples (their mean) that one of them sets apart: the other sample, in ms, where it alone
        agrees with the reference; None otherwise. No single outlier may make a fail, and a median of three or more
        already leaves one out."""
        if len(self.reading.ms) != 2 or self.agrees:
            return None
        return next((ms for ms in self.reading.ms if self.within(ms)), None)


def lesson_pace(lesson: LessonResult) -> Any:
    """The pace readings a lesson kept with its readings of the machine's load (bytesup.run.pace), None without."""
    return (lesson.host_values.get(busy.HOST_VALUE) or {}).get("pace")


def pace_medians(run: Run, prefill: bool = False) -> list[float]:
    """The medians of every pace reading the run took (bytesup.run.pace), in lesson order: each lesson's reading before
    it, then the last lesson's after it (the reading after one lesson is the one before the next, kept with both).
    Its decodes' tokens/s, or with `prefill` its prefills' prompt tokens/s (none in a run recorded before them)."""
    out: list[float] = []
    last: list[float] = []
    for lesson in sorted(run.results.values(), key=lambda r: r.lesson_id):
        pace = lesson_pace(lesson)
        for at in (("prefill_before", "prefill_after") if prefill else ("before", "after")):
            samples = busy.pace_samples(pace, at)
            if samples and samples != last:
                out.append(median(samples))
            last = samples or last
    return out


def prefill_brackets(run: Run) -> dict[str, tuple[float, float]]:
    """Each lesson's pace prefills around it: (the slower, the faster) of the medians read just before and just after
    it, in prompt tokens/s, by lesson id; a lesson without both readings is left out."""
    return pace_brackets(run, ("prefill_before", "prefill_after"))


def decode_brackets(run: Run) -> dict[str, tuple[float, float]]:
    """Each lesson's pace decodes around it: (the slower, the faster) of the medians read just before and just after
    it, in tokens/s, by lesson id. The pace decodes 16 tokens and the lessons 32 to 128, so its speed is not theirs:
    the decode claim sets them in shares of the pace around the lessons a lesson is judged against (`reference_pace`)."""
    return pace_brackets(run, ("before", "after"))


def pace_brackets(run: Run, ends: tuple[str, str]) -> dict[str, tuple[float, float]]:
    """(the slower, the faster) of the pace medians read at `ends` of each lesson, by lesson id; a lesson without both
    readings is left out."""
    out: dict[str, tuple[float, float]] = {}
    for lesson in run.results.values():
        pace = lesson_pace(lesson)
        read = [busy.pace_samples(pace, at) for at in ends]
        if all(read):
            before, after = (median(r) for r in read)
            out[lesson.lesson_id] = (min(before, after), max(before, after))
    return out


def beyond_bracket(tokens_per_s: float, bracket: tuple[float, float]) -> float:
    """How far a speed lies outside a bracket (slower, faster) of the pace: 0 inside it, else its speed against the
    nearer end − 1 (+0.05: 5% faster than the faster end)."""
    slower, faster = bracket
    if tokens_per_s > faster:
        return tokens_per_s / faster - 1
    if tokens_per_s < slower:
        return tokens_per_s / slower - 1
    return 0.0


def reference_pace(found: list[Reading], r: Reading, brackets: dict[str, tuple[float, float]]) -> float | None:
    """The pace around the lessons `r` is judged against, taken as `reference_ms` takes their figures: the median,
    over every reading, of the pace around its lesson (the geometric mean of its bracket's two ends); with two
    readings, the other's. None where one of those lessons has no bracket."""
    around = []
    for other in judged_against(found, r):
        bracket = brackets.get(other.lesson_id)
        if bracket is None:
            return None
        around.append(math.sqrt(bracket[0] * bracket[1]))
    return median(around)


def wander(medians: list[float]) -> float | None:
    """The machine's own wander over the run: how far its pace readings' medians lie from their median, |reading ÷
    median − 1|, the furthest but one (so that one reading cannot set it); None with fewer than MIN_PACES readings.
    The claim sets the lesson furthest from the lessons' median against it: the same measure, taken of the machine."""
    if len(medians) < MIN_PACES:
        return None
    middle = median(medians)
    return sorted(abs(m / middle - 1) for m in medians)[-2]


def judged_against(found: list[Reading], r: Reading) -> list[Reading]:
    """The readings `r` is judged against: every one (itself included); with two readings, the other one (the median
    of two would put each half-way to the other)."""
    return [o for o in found if o is not r] if len(found) == 2 else found


def reference_ms(found: list[Reading], r: Reading) -> float:
    """What `r` is judged against: the median of the figures of the readings it is judged against (`judged_against`)."""
    return median([o.figure_ms for o in judged_against(found, r)])


def judge(found: list[Reading], wandered: float | None = None) -> tuple[list[Judged], float | None]:
    """Each reading against its reference, within its tolerance (see the module: at least ±DRIFT_TOLERANCE, the
    pooled spread and the machine's wander `wandered`); and the pooled spread (None where the samples are too few)."""
    pooled = pooled_spread([r.spread for r in found if r.enough and r.pooled])
    tolerance = max(DRIFT_TOLERANCE, pooled or 0.0, wandered or 0.0)
    return [Judged(r, reference_ms(found, r), tolerance) for r in found], pooled


def pace_sentence(medians: list[float], prefill: bool = False) -> str:
    """What the run read of the machine's pace (its decodes, or with `prefill` its prefills), for the claim's detail."""
    if not medians:
        return ("The run read no pace of the machine (a run of one lesson, or recorded before runs did"
                + (", or before the pace had a prefill)" if prefill else ")"))
    spread = wander(medians)
    what = "prefill of a text of about 128 tokens" if prefill else "short decode"
    return (f"The machine's pace, the same {what} on the run's server before and after every lesson: "
            f"{len(medians)} readings, medians from {min(medians):.4g} to {max(medians):.4g} tokens/s"
            + (f", the furthest but one {spread:.1%} from their median" if spread is not None
               else f" (fewer than {MIN_PACES}: no wander)"))


def differing(bad: Reading, agreeing: list[Reading]) -> list[str]:
    """The settings of `bad`'s shape that none of `agreeing` recording them shares, each with their values: e.g.
    "--parallel 4 (the others: 1 in 04, 05)". A setting a lesson that agrees shares cannot be what sets `bad` apart."""
    out = []
    for key in SHAPE_ORDER:
        value = bad.shape.get(key)
        theirs = [(o.shape[key], o.label) for o in agreeing if key in o.shape]
        if value is None or not theirs or any(_same(key, v, value) for v, _ in theirs):
            continue
        by_value: dict[str, list[str]] = {}
        for v, label in theirs:
            by_value.setdefault(v, []).append(label)
        out.append(f"{_setting(key, value)} (the others: " + "; ".join(f"{v} in {', '.join(ls)}" for v, ls in by_value.items()) + ")")
    return out


def _same(key: str, a: str, b: str) -> bool:
    """Whether two values of a setting can be one: equal, or for the engine one the other without its build (lesson
    5b records its servers' engine by name alone: "llama-server" against "llama-server b11434")."""
    if key == ENGINE:
        shorter, longer = sorted((a.split(), b.split()), key=len)
        return longer[:len(shorter)] == shorter
    return a == b


def shape_text(r: Reading) -> str:
    return ", ".join(_setting(k, r.shape[k]) for k in SHAPE_ORDER if k in r.shape)


def _setting(key: str, value: str) -> str:
    return value if key in NAMED_BY_VALUE else f"{key} {value}"


def _speed(ms: float, prefill: bool) -> str:
    return f"{1e3 / ms:.4g} tokens/s" + ("" if prefill else f" ({ms:.3g} ms a step)")


def machine_moved(bad: list[Judged], brackets: dict[str, tuple[float, float]],
                  found: list[Reading] | None = None) -> str | None:
    """Why a gap cannot be told from the machine's own movement, where every lesson set apart (`bad`) lies within
    its tolerance of the pace read around it (`brackets`, by lesson id: see the module); None where one of them has
    no bracket or lies further from it, and where no lesson is set apart. Given every reading (`found`), the pace is
    another quantity than the lessons' (the decode claim): a lesson's place is its figure ÷ the lessons' reference,
    and its bracket's ends are in shares of the pace around the lessons it is judged against (`reference_pace`)."""
    if not bad or any(j.reading.lesson_id not in brackets for j in bad):
        return None
    shares = found is not None
    parts = []
    for j in bad:
        slower, faster = bracket = brackets[j.reading.lesson_id]
        if found is not None:
            around = reference_pace(found, j.reading, brackets)
            if around is None:
                return None
            slower, faster = bracket = (slower / around, faster / around)
        off = beyond_bracket(1 + j.deviation if shares else j.reading.tokens_per_s, bracket)
        if abs(off) > j.tolerance * (1 + 1e-12):
            return None
        where = "between them" if off == 0 else f"{off:+.1%} beyond the nearer"
        if shares:
            parts.append(f"{j.reading.label} at {1 + j.deviation:.3f}× the lessons' reference against the pace around "
                         f"it at {slower:.3f}× and {faster:.3f}× the pace around the lessons it is set against ({where})")
        else:
            parts.append(f"{j.reading.label} at {j.reading.tokens_per_s:.4g} tokens/s against the pace's {slower:.4g} "
                         f"and {faster:.4g} around it ({where})")
    what = "short decode" if shares else "prefill"
    return ("inconclusive: the lessons differ by more than the tolerance, but each lesson set apart lies within the "
            f"tolerance of the pace, the same {what} read on the run's server just before and just after it: "
            + "; ".join(parts) + f". The machine's own {what} moved by as much around them, so the gap cannot be "
            "told from it")


def set_apart_by_one_sample(bad: list[Judged], prefill: bool) -> str:
    """Why a gap set by one sample of a two-sample figure is no fail (see `Judged.one_sample_apart`)."""
    parts = []
    for j in bad:
        other = j.one_sample_apart
        assert other is not None
        odd = j.reading.ms[1] if j.reading.ms[0] == other else j.reading.ms[0]
        parts.append(f"{j.reading.label}'s figure is the mean of its two samples, {_speed(odd, prefill)} and "
                     f"{_speed(other, prefill)}, and the second alone lies {j.reference_ms / other - 1:+.1%} from the "
                     "reference, within the tolerance")
    return ("inconclusive: the lessons set apart are each set apart by one sample of two, and no single sample may make a "
            "fail: " + "; ".join(parts))


def consistency_check(cid: str, text: str, found: list[Reading], absent: list[str], prefill: bool = False,
                      runs: list[str] | None = None, paces: list[float] | None = None,
                      paced_prefill: bool = False, brackets: dict[str, tuple[float, float]] | None = None,
                      shares: bool = False) -> ClaimResult:
    """The claim's result from the lessons' readings (`absent`: why a lesson has none; `runs`: lessons recorded
    with different run servers, which makes the comparison not applicable; `paces`: the pace's medians, of its
    prefills where `paced_prefill`, else of its decodes; `brackets`: the pace read around each lesson, by lesson id,
    where it reads the lessons' own quantity, or with `shares` as shares of its median: see the module)."""
    lessons = ", ".join(sorted({r.lesson_id[:3].rstrip("_") for r in found})) or "—"
    na_for = ("; not applicable for: " + "; ".join(absent)) if absent else ""
    if runs:
        return ClaimResult(cid, "general", lessons, text, NA,
                           detail="these lessons were served by different servers of the run (a run resumed with a new "
                                  "server, or a folder put together from several runs), so their figures were not taken "
                                  "in one sitting: " + "; ".join(runs))
    if len(found) < 2:
        return ClaimResult(cid, "general", lessons, text, NA,
                           detail=f"{len(found)} lesson{'s' if len(found) != 1 else ''} measured it; agreement needs two"
                                  + na_for)
    paces = paces or []
    wandered = wander(paces)
    judged, pooled = judge(found, wandered)
    bad = [j for j in judged if not j.agrees]
    agreeing = [j.reading for j in judged if j.agrees]
    if wandered is not None and wandered > max(DRIFT_TOLERANCE, pooled or 0.0):
        tolerance = (f"±{wandered:.1%}: the machine's own wander over the run (its pace readings' medians, "
                     f"{'prefill ' if paced_prefill else ''}{min(paces):.4g} to {max(paces):.4g} tokens/s, lie that far "
                     f"from their median, the furthest but one), more than the least of ±{DRIFT_TOLERANCE:.0%}")
    elif pooled is None:
        tolerance = (f"±{DRIFT_TOLERANCE:.0%}: too few samples for a spread (fewer than two lessons with "
                     f"{MIN_SAMPLES} or more)")
    elif pooled > DRIFT_TOLERANCE:
        tolerance = (f"±{pooled:.1%}: the pooled spread (interquartile range ÷ median) of the lessons with "
                     f"{MIN_SAMPLES} samples or more")
    else:
        tolerance = (f"±{DRIFT_TOLERANCE:.0%}: the least for figures taken minutes apart; the pooled spread of the "
                     f"lessons with {MIN_SAMPLES} samples or more, ±{pooled:.1%}, is how one lesson's samples scatter "
                     "over seconds")
    furthest = max(judged, key=lambda j: abs(j.deviation))
    observed = (f"furthest {furthest.reading.label}: {_speed(furthest.reading.figure_ms, prefill)}, "
                f"{furthest.deviation:+.1%} against {_speed(furthest.reference_ms, prefill)}")
    every = "; ".join(f"{j.reading.label}: {1e3 / j.reading.figure_ms:.4g} tokens/s ({len(j.reading.ms)} samples, "
                      f"{j.deviation:+.1%}; {shape_text(j.reading)})" for j in judged)
    if bad:
        versus = "the other figure" if len(found) == 2 else "the lessons' median"
        # Set against the lessons that agree; where none does, against every other one.
        whom = "the lessons that agree" if agreeing else "the other lessons"
        named = []
        for j in bad:
            settings = differing(j.reading, agreeing or [o for o in found if o is not j.reading])
            named.append(f"{j.reading.label} is {j.deviation:+.1%} against {versus} "
                         + (f"and differs from {whom} in {', '.join(settings)}" if settings else
                            f"yet shares every recorded setting of its server shape with one of {whom}: what "
                            "differed is no recorded setting (the machine's speed at the time, or a setting the "
                            "lessons do not record)"))
        detail = "; ".join(named) + f". Every lesson: {every}"
    else:
        detail = f"every lesson: {every}"
    status = FAIL if bad else PASS
    moved = machine_moved(bad, brackets or {}, found if shares else None)
    if moved is not None:
        status, detail = INCONCLUSIVE, moved + ". " + detail
    elif bad and all(j.one_sample_apart is not None for j in bad):
        status, detail = INCONCLUSIVE, set_apart_by_one_sample(bad, prefill) + ". " + detail
    detail += ". " + pace_sentence(paces, paced_prefill) + ". Read from: " + "; ".join(f"{r.label}, {r.source}" for r in found)
    return ClaimResult(cid, "general", lessons, text, status, observed=observed,
                       expected=("each lesson's median within the tolerance of the median of every lesson's median (with "
                                 "two lessons, of the other's)"),
                       tolerance=tolerance, detail=detail + na_for)


def different_runs(run: Run, found: list[Reading]) -> list[str]:
    """The run's servers the lessons of `found` recorded, where they are not all one; [] where they are."""
    by_server: dict[tuple[str, ...], list[str]] = {}
    for lesson_id in dict.fromkeys(r.lesson_id for r in found):
        by_server.setdefault(server_identity(run.results[lesson_id]), []).append(lesson_id[:3].rstrip("_"))
    if len(by_server) < 2:
        return []
    out = []
    for identity, lessons in by_server.items():
        port = next((f.split("=", 1)[1] for f in identity[2:] if f.startswith("--port=")), "?")
        out.append(f"{', '.join(lessons)} on port {port}")
    return out


@grouped(ITSELF)
def claim_default_decode_agrees_across_lessons(run: Run) -> list[ClaimResult]:
    """The default model's decode at one sequence after a short prompt, as every lesson that measures it found it."""
    found, absent = set_busy_aside(run, *readings(run, DECODE))
    return [unless_busy(run, consistency_check("default_decode_agrees_across_lessons",
                                               "the default model's decode speed at one sequence agrees across the "
                                               "lessons that measure it", found, absent, runs=different_runs(run, found),
                                               paces=pace_medians(run), brackets=decode_brackets(run), shares=True),
                        *sorted({r.lesson_id for r in found}))]


@grouped(ITSELF)
def claim_prefill_agrees_across_lessons(run: Run) -> list[ClaimResult]:
    """The default model's prefill of a 128-token prompt, as every lesson that measures it found it."""
    found, absent = set_busy_aside(run, *readings(run, PREFILL))
    prefills = pace_medians(run, prefill=True)  # a run recorded before the pace had prefills: its decodes
    return [unless_busy(run, consistency_check("prefill_128_agrees_across_lessons",
                                               f"the default model's prefill of {PREFILL_TOKENS} tokens agrees across the "
                                               "lessons that measure it", found, absent, prefill=True,
                                               runs=different_runs(run, found), paces=prefills or pace_medians(run),
                                               paced_prefill=bool(prefills), brackets=prefill_brackets(run)),
                        *sorted({r.lesson_id for r in found}))]
