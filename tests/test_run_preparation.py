"""What a live run does before its first lesson and how it splits each lesson's time: the models the lessons
declare (run/models.py), made once each and never in a replay; each lesson's wall time split by part
(host/spent.py) so the parts add up to it; the embedded engine's gap against the native build in numbers and words
(run/engines.py); and the manifest's new fields read back, older manifests still read."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from bytesup.host import spent
from bytesup.lesson import LessonContext, ModelQuery, Reporter
from bytesup.llama import build
from bytesup.llama.process import EngineChoice
from bytesup.models import catalog
from bytesup.models import smollm2
from bytesup.options import RunOptions
from bytesup.run import engines
from bytesup.run import models
from bytesup.run import runner
from bytesup.run.folder import run_readme
from bytesup.run.timing import split_blocks, split_rows
from bytesup.store.manifest import EngineGap, LessonEntry, Manifest, ModelsMade, TimeSplit

ROOT = Path(__file__).resolve().parents[1]
F32, Q4, Q8, F16 = "smollm2-135m-f32", "smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16"
DECLARING = ["04_next_token", "05b_speculative_decoding", "06_attention_kv_cache", "08_capstone_decode_memory_bound",
             "09_beyond_one_machine"]


def query(served: Path | None = None, sha: str | None = None, local: bool = True, repeat: int = 1) -> ModelQuery:
    return ModelQuery(served=served, served_sha256=sha, local=local, repeat=repeat, options=None)


# --- which models -----------------------------------------------------------------------------------

def test_the_lessons_declare_their_models_from_their_plans(tmp_path):
    """The narrower default width served here: lesson 4 asks for the f32 width, 5b for its plan's target and drafts,
    8 for its plan's nine models (a second of each weight type), 9 for nothing (the served file is readable), 6
    declares none; each once, the shipped width (the others are derived from it) first."""
    served = tmp_path / "served.gguf"
    served.write_bytes(b"GGUF")
    names = models.lesson_models(DECLARING, RunOptions(), query(served, smollm2.REAL_MODELS[Q4].sha256))
    assert names == [Q4, F32, Q8, F16, "medium-q8_0", "large-q8_0", "medium-q4_1", "medium-f16", "medium-f32"]


def test_a_model_the_options_leave_out_is_not_declared(tmp_path):
    served = tmp_path / "served.gguf"
    served.write_bytes(b"GGUF")
    options = RunOptions(lesson_options={"sizes": ["tiny-q8_0", str(tmp_path / "mine.gguf")]})
    names = models.lesson_models(["08_capstone_decode_memory_bound"], options, query(served, "not a width"))
    assert names == ["tiny-q8_0"]  # a GGUF path of one's own is left to the lesson


def test_what_the_served_model_and_the_host_decide():
    """Lesson 4 asks for the f32 width only beside a narrower width; a server elsewhere gets no sweep and no
    speculation; an unreadable served model makes lesson 9 ask for the default model."""
    f32_sha = smollm2.REAL_MODELS[F32].sha256
    assert models.lesson_models(["04_next_token"], RunOptions(), query(None, f32_sha)) == []
    assert models.lesson_models(["04_next_token"], RunOptions(), query(None, smollm2.REAL_MODELS[Q8].sha256)) == [F32]
    remote = ["05b_speculative_decoding", "08_capstone_decode_memory_bound", "09_beyond_one_machine"]
    assert models.lesson_models(remote, RunOptions(), query(None, None, local=False)) == [catalog.DEFAULT_MODEL]


def test_a_faulty_declaration_leaves_its_models_to_the_lesson(tmp_path, monkeypatch):
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "01_fine.py").write_text('"""Fine."""\ndef models_needed(query):\n    return ["tiny-q8_0", "tiny-q8_0"]\n'
                                        "def main(ctx):\n    return ctx.finish()\n")
    (lessons / "02_broken.py").write_text('"""Broken."""\ndef models_needed(query):\n    raise RuntimeError("bug")\n'
                                          "def main(ctx):\n    return ctx.finish()\n")
    (lessons / "03_unknown.py").write_text('"""Unknown."""\ndef models_needed(query):\n    return ["no-such-model"]\n'
                                           "def main(ctx):\n    return ctx.finish()\n")
    monkeypatch.setenv("BYTESUP_LESSONS", str(lessons))
    assert models.lesson_models(["01_fine", "02_broken", "03_unknown"], RunOptions(), query()) == ["tiny-q8_0"]


# --- made once, with a summary ---------------------------------------------------------------------

@pytest.fixture
def fake_making(tmp_path, monkeypatch):
    """models/ in a temporary folder, and ensure_model writing a small file there and counting its calls."""
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path / "models"))
    (tmp_path / "models").mkdir()
    calls: list[str] = []

    def ensure(name, out=None, progress=None):
        calls.append(name)
        if progress is not None:
            progress(f"{name}: half", 0.5)
        path = catalog.default_model_path(name)
        path.write_bytes(b"GGUF")
        return path

    monkeypatch.setattr(catalog, "ensure_model", ensure)
    return calls


def test_each_model_is_made_once_and_the_summary_counts_them(fake_making, capsys):
    from rich.console import Console

    catalog.default_model_path("tiny-f16").write_bytes(b"GGUF")  # already there
    console = Console(file=None, force_terminal=False, width=200)
    made = models.make_models(["tiny-q8_0", "tiny-f16"], console)
    made = models.make_models(["tiny-q8_0", "small-q8_0", "tiny-f16"], console, made)
    assert fake_making == ["tiny-q8_0", "small-q8_0"]
    assert list(made.paths) == ["tiny-q8_0", "tiny-f16", "small-q8_0"] and made.made == ["tiny-q8_0", "small-q8_0"]
    line = models.summary(made)
    assert line.startswith("models ready: 3 (2 made now in ") and line.endswith(" s, 1 already there)")
    record = made.record()
    assert record.models == ["tiny-q8_0", "tiny-f16", "small-q8_0"] and record.made == ["tiny-q8_0", "small-q8_0"]


def test_a_model_that_cannot_be_made_is_said_and_left_to_the_lessons(fake_making, monkeypatch):
    from rich.console import Console

    from bytesup.errors import BytesupError

    def fails(name, out=None, progress=None):
        raise BytesupError("no network")

    monkeypatch.setattr(catalog, "ensure_model", fails)
    console = Console(file=None, force_terminal=False)
    made = models.make_models(["tiny-q8_0"], console)
    assert made.failed == {"tiny-q8_0": "no network"} and "not made: tiny-q8_0 (no network)" in models.summary(made)
    with pytest.raises(BytesupError, match="no network"):  # the run's own server's model stops the run
        models.make_models(["small-q8_0"], console, required="small-q8_0")
    assert models.summary(models.Made()) == "models ready: none needed"


def test_a_replay_makes_no_model(tmp_path, monkeypatch):
    def no_making(*args, **kwargs):
        raise AssertionError("a model was made in a replay")

    monkeypatch.setattr(runner, "models_first", no_making)
    monkeypatch.setattr(catalog, "ensure_model", no_making)
    source = ROOT / "tests" / "fixtures" / "runs" / "02_tokens_and_embeddings"
    out = tmp_path / "replayed"
    assert runner.run_lessons(["02_tokens_and_embeddings"], RunOptions(replay=source, out=out, command=["test"])) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert "models_made" not in manifest and "engine_gap" not in manifest
    assert "time_split" not in manifest["lessons"]["02_tokens_and_embeddings"]  # a replay measures nothing


# --- the split of a lesson's time ------------------------------------------------------------------

def test_the_parts_add_up_to_the_wall_time_on_a_hand_made_recording():
    """A 10 s lesson: two requests sent together (1.0-2.0 and 1.5-2.5 s: 1.5 s in flight), a server started
    3-5 s with a model made inside it 3.5-4 s, a host measurement 5.5-8 s with llama-bench inside it 6-7 s, and a
    part begun before the lesson (clipped to it)."""
    recording = spent.StampedList()
    recording.stamps += [(2.0, {"elapsed_ms": 1000.0}), (2.5, {"elapsed_ms": 1000.0}), (9.0, {"status": 200})]
    intervals = [*recording.request_intervals(), ("servers", 3.0, 5.0), ("models", 3.5, 4.0), ("host", 5.5, 8.0),
                 ("llama_bench", 6.0, 7.0), ("host", -2.0, 0.25)]
    split = spent.split(0.0, 10.0, intervals)
    assert split.parts_ms == {"llama_bench": 1000, "models": 500, "servers": 1500, "requests": 1500, "host": 1750}
    assert split.rest_ms == 10000 - (1000 + 500 + 1500 + 1500 + 1750) == 3750
    assert sum(split.parts_ms.values()) + split.rest_ms == split.wall_ms == 10000
    record = TimeSplit(**split.seconds(), requests=2)
    assert (record.wall_s, record.requests_s, record.rest_s) == (10.0, 1.5, 3.75)


def test_the_split_of_a_lesson_timed_now_adds_up():
    """The runner's split from the ledger and a stamped recording: whatever the times, the parts sum to the wall."""
    start, at = spent.time.perf_counter(), spent.mark()
    with spent.spent("servers"), spent.spent("models"):
        sum(range(10_000))
    sink = spent.StampedList()
    sink.append({"elapsed_ms": 0.5})
    sink.append({"path": "/health"})  # no elapsed_ms: not a timed request
    record = runner.time_split(start, at, sink)
    parts = [record.models_s, record.servers_s, record.requests_s, record.llama_bench_s, record.host_s, record.rest_s]
    assert round(sum(p or 0.0 for p in parts) * 1000) == round((record.wall_s or 0.0) * 1000)
    assert record.requests == 1


def test_work_that_times_this_host_is_its_measurement_in_the_split():
    """A lesson's own timed work (lesson 6's numpy steps) inside `ctx.timing_host()` counts as this host's
    measurement, and the same work outside it as the rest: a sleep of 50 ms moves from one part to the other."""
    ctx = LessonContext("t", "t", server=None, run=RunOptions(command=["t"]), model_path=None, sink=[], replay=None,
                        progress=Reporter(None, "t"))
    for inside in (True, False):
        start, at = spent.time.perf_counter(), spent.mark()
        with ctx.timing_host() if inside else contextlib.nullcontext():
            time.sleep(0.05)
        record = runner.time_split(start, at, spent.StampedList())
        host, rest = record.host_s or 0.0, record.rest_s or 0.0
        assert (host >= 0.05 and rest < 0.01) if inside else (host == 0.0 and rest >= 0.05)


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="unknown part"):
        with spent.spent("coffee"):
            pass


# --- the engines' gap -------------------------------------------------------------------------------

def test_the_gap_in_numbers_and_words():
    embedded, native = engines.Speeds(prefill=300.0, decode=60.0), engines.Speeds(prefill=400.0, decode=75.0)
    assert engines.ratios(embedded, native) == (60 / 75, 300 / 400)
    line = engines.gap_sentence("m.gguf", embedded, native, ["AVX", "AVX2"], ["AVX", "AVX2", "AVX512"], ["AVX512"])
    assert line.startswith("On this CPU the embedded engine decodes at 0.80× and prefills at 0.75× the native build's "
                           "speed (60.0 against 75.0 tokens/s decoding 16 tokens, 300 against 400 tokens/s over a "
                           "128-token prompt, on m.gguf;")
    assert line.endswith("The native build runs AVX, AVX2, AVX512; the embedded wheel AVX, AVX2, without AVX512, which "
                         "this CPU has.")
    assert "the medians of 3 requests each, taken in turns" in line and "busy" not in line
    # One slow request of three moves no median: 60, 20 (the machine busy) and 62 tokens/s give 60.
    slow = [engines.Speeds(prefill=300.0, decode=60.0), engines.Speeds(prefill=100.0, decode=20.0),
            engines.Speeds(prefill=310.0, decode=62.0)]
    assert engines.median_of(slow) == engines.Speeds(prefill=300.0, decode=60.0)
    busy = engines.busy([5.8, 4.0, 4.0], 2)
    assert busy == "the machine was busy, a load average of 5.80 on 2 cores, so the ratios say little"
    assert engines.busy([1.5], 2) is None
    assert busy in engines.gap_sentence("m.gguf", embedded, native, [], [], [], busy)
    same = engines.gap_sentence("m.gguf", embedded, native, ["AVX2"], ["AVX2"], [])
    assert same.endswith("AVX2, which leaves none of llama.cpp's wider kernels unused on this CPU.")


def test_only_the_embedded_engine_says_what_it_misses_and_how_to_get_the_native_build():
    line = engines.only_embedded_sentence("no native build is cached", ["AVX512", "AVX512_VNNI"])
    assert line.startswith("Only the embedded engine is ready (no native build is cached). This CPU has AVX512, "
                           "AVX512_VNNI, which the embedded wheel was built without")
    assert "`make native`" in line
    assert "kernels use every instruction set" in engines.only_embedded_sentence("why", [])


def test_the_instruction_sets_of_each_engine():
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |"
    assert engines.instruction_sets(info) == ["AVX", "AVX2", "SSE3"]
    cpu = build.Cpu("x", frozenset({"pni", "avx", "avx2", "fma", "avx512f", "amx_int8"}))
    assert engines.native_instruction_sets("", "native", cpu) == ["AMX_INT8", "AVX", "AVX2", "AVX512", "FMA", "SSE3"]
    assert engines.native_instruction_sets("", "native-no-amx", cpu) == ["AVX", "AVX2", "AVX512", "FMA", "SSE3"]
    assert engines.native_instruction_sets("", "portable", cpu) == []
    assert engines.native_instruction_sets(info, "native", cpu) == ["AVX", "AVX2", "SSE3"]  # its log, where it has one


def test_the_comparison_is_skipped_by_its_variable(monkeypatch):
    monkeypatch.setenv(engines.GAP_ENV, "0")
    assert engines.skipped_by_env()
    monkeypatch.setenv(engines.GAP_ENV, "1")
    assert not engines.skipped_by_env()


def test_with_only_the_embedded_engine_nothing_is_started(monkeypatch):
    monkeypatch.setattr(engines, "native_ready", lambda: (None, "no native build is cached"))
    monkeypatch.setattr(build, "embedded_system_info", lambda: "CPU : AVX2 = 1 |")
    monkeypatch.setattr(build, "this_cpu", lambda: build.Cpu("x", frozenset({"avx2", "avx512f"})))
    monkeypatch.setattr(engines, "measure", lambda *a: pytest.fail("an engine was started"))
    gap = engines.compare(RunOptions(), None)
    assert gap.unused_by_embedded == ["AVX512"] and gap.enable_command == "make native"
    assert gap.sentence is not None and gap.sentence.startswith("Only the embedded engine is ready")


# --- the manifest's fields, new and old ---------------------------------------------------------------

def test_the_new_fields_read_back():
    manifest = Manifest(lessons={"01_x": LessonEntry(status="ok", seconds=1.0, time_split=TimeSplit(
        wall_s=1.0, models_s=0.0, servers_s=0.25, requests_s=0.5, llama_bench_s=0.0, host_s=0.125, rest_s=0.125,
        requests=3))}, models_made=ModelsMade(models=[Q4, F32], made=[F32], seconds=12.5), server_start_s=2.0,
        engine_gap=EngineGap(sentence="On this CPU …", decode_ratio=0.8, prefill_ratio=0.75, load_average=[1.0]))
    data = json.loads(json.dumps(manifest.to_json()))
    again = Manifest.parse(data, "manifest.json")
    assert again == manifest and again.to_json() == data
    assert data["lessons"]["01_x"]["time_split"]["servers_s"] == 0.25 and data["models_made"]["made"] == [F32]


def committed_manifests() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "outputs/*/manifest.json", "tests/fixtures/runs/*/manifest.json"],
                            cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / p for p in listed.stdout.split()]


def recorded_with_split(path: Path) -> bool:
    """Whether a committed manifest was written by a run that split each lesson's time (lesson 8's fixture, recorded
    again for the per-type decode-time model, is one; every other was recorded before)."""
    return any("time_split" in e for e in json.loads(path.read_text(encoding="utf-8"))["lessons"].values())


@pytest.mark.parametrize("path", [p for p in committed_manifests() if not recorded_with_split(p)],
                         ids=lambda p: p.parent.name)
def test_older_manifests_still_read_and_show_no_split(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    manifest = Manifest.parse(data, str(path))
    assert manifest.to_json() == data
    assert all(e.time_split is None for e in manifest.lessons.values())
    assert manifest.models_made is None and manifest.engine_gap is None
    assert split_rows(manifest) == [] and split_blocks(manifest) == []
    assert "Where each lesson's time went" not in run_readme(path.parent, manifest)


@pytest.mark.parametrize("path", [p for p in committed_manifests() if recorded_with_split(p)],
                         ids=lambda p: p.parent.name)
def test_a_committed_manifest_with_a_split_reads_back_and_shows_it(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    manifest = Manifest.parse(data, str(path))
    assert manifest.to_json() == data
    assert all(e.time_split is not None for e in manifest.lessons.values()) and manifest.models_made is not None
    assert len(split_rows(manifest)) >= len(manifest.lessons)
    assert "Where each lesson's time went" in run_readme(path.parent, manifest)


def test_the_readme_shows_each_lesson_split_and_what_came_before(tmp_path):
    manifest = Manifest(status="complete", models_made=ModelsMade(models=[Q4, F32], made=[F32], seconds=12.5),
                        server_start_s=2.04, engine_gap=EngineGap(seconds=4.2), lessons={
        "01_a": LessonEntry(status="ok", seconds=2.0, time_split=TimeSplit(wall_s=2.0, models_s=0.0, servers_s=0.0,
                            requests_s=1.25, llama_bench_s=0.0, host_s=0.5, rest_s=0.25, requests=4)),
        "02_b": LessonEntry(status="ok", seconds=3.0, time_split=TimeSplit(wall_s=3.0, models_s=0.0, servers_s=1.0,
                            requests_s=1.0, llama_bench_s=0.5, host_s=0.0, rest_s=0.5, requests=2))})
    text = run_readme(tmp_path, manifest)
    assert ("Before its first lesson the run had 2 models ready, 1 made in 12.5 s; its own server started in 2.0 s; "
            "the engines compared in 4.2 s.") in text
    assert "| 01_a | 2.0 | 0.0 | 0.0 | 1.2 | 0.0 | 0.5 | 0.2 |" in text  # 1.25 and 0.25 rounded half to even
    assert "| 02_b | 3.0 | 0.0 | 1.0 | 1.0 | 0.5 | 0.0 | 0.5 |" in text
    assert "| all | 5.0 | 0.0 | 1.0 | 2.2 | 0.5 | 0.5 | 0.8 |" in text  # the sums: 2.25 → 2.2, 0.75 → 0.8


def test_the_closing_note_shows_each_lesson_split():
    from rich.console import Console

    from bytesup.run.summary import split_table

    console = Console(record=True, width=80)
    manifest = Manifest(lessons={"01_a": LessonEntry(status="ok", time_split=TimeSplit(
        wall_s=2.0, models_s=0.0, servers_s=0.5, requests_s=1.0, llama_bench_s=0.0, host_s=0.25, rest_s=0.25)),
        "02_b": LessonEntry(status="ok")})
    split_table(console, manifest, ["01_a", "02_b"])
    text = console.export_text()
    assert "where each lesson's time went (s)" in text
    assert [c for c in text.splitlines() if "01" in c][0].split("│")[1:-1] == [
        " 01     ", "  2.0 ", "    0.0 ", "     0.5 ", "      1.0 ", "         0.0 ", "  0.2 ", "  0.2 "]
    quiet = Console(record=True)
    split_table(quiet, Manifest(lessons={"02_b": LessonEntry(status="ok")}), ["02_b"])
    assert quiet.export_text() == ""  # a run without the split prints no table


def test_a_failed_comparison_is_said_and_the_run_goes_on(monkeypatch, tmp_path):
    from bytesup.errors import ServerStartError

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setattr(engines, "native_ready", lambda: (tmp_path, "the native build (native, llama.cpp 1)"))
    monkeypatch.setattr(build, "embedded_system_info", lambda: "CPU : AVX2 = 1 |")

    def fails(*args):
        raise ServerStartError("the server exited at once")

    monkeypatch.setattr(engines, "measure", fails)
    gap = engines.compare(RunOptions(), model)
    assert gap.skipped == "the comparison failed: the server exited at once" and gap.sentence is None
    assert gap.seconds is not None


def test_the_engines_answer_in_turns_the_order_alternating(monkeypatch, tmp_path):
    """Three requests each, native then embedded, then embedded then native, then native then embedded: a drift of
    the machine's speed during the comparison falls on both engines alike."""
    import contextlib

    asked: list[str] = []

    @contextlib.contextmanager
    def serving(choice, model, options):
        yield choice.source, [1, 2, 3], "CPU : AVX2 = 1 |" if choice.source == "native build" else ""

    def timed(client, prompt):
        asked.append(client)
        return engines.Speeds(prefill=float(len(asked)), decode=1.0)

    monkeypatch.setattr(engines, "serving", serving)
    monkeypatch.setattr(engines, "timed", timed)
    native = EngineChoice("llama-server", ["x"], "native build", "why")
    embedded = EngineChoice("embedded", ["y"], "embedded", "why")
    natives, embeddeds, info = engines.measure(native, embedded, tmp_path / "m.gguf", RunOptions())
    assert asked == ["native build", "embedded", "embedded", "native build", "native build", "embedded"]
    assert [s.prefill for s in natives] == [1.0, 4.0, 5.0] and [s.prefill for s in embeddeds] == [2.0, 3.0, 6.0]
    assert info == "CPU : AVX2 = 1 |"
