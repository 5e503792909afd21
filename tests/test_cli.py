"""The CLI in-process (typer's CliRunner): what it printed and what it wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.llama.process import free_port
from bytesup.errors import BytesupError
from bytesup.models.catalog import SYNTHETIC_DEFAULT, ensure_model, file_sha256

runner = CliRunner()


def test_lessons_lists_every_lesson_with_its_title():
    res = runner.invoke(app, ["lessons"])
    assert res.exit_code == 0
    for lid in ("01_model_on_disk", "04_next_token", "08_capstone_decode_memory_bound"):
        assert lid in res.output
    assert "The forward pass" in res.output


def test_model_build_list_and_build(tmp_path):
    listed = runner.invoke(app, ["model", "build", "--list"])
    assert listed.exit_code == 0 and "smollm2-135m-q4_1 *" in listed.output
    out = tmp_path / "m.gguf"
    built = runner.invoke(app, ["model", "build", SYNTHETIC_DEFAULT, "--out", str(out)])
    assert built.exit_code == 0 and out.is_file()
    assert file_sha256(out) in built.output.replace("\n", "")


def test_model_build_unknown_preset():
    res = runner.invoke(app, ["model", "build", "enormous-q2"])
    assert res.exit_code != 0 and "tiny-q8_0" in res.output


@pytest.mark.integration
def test_server_start_status_stop(tmp_path):
    port = free_port()
    started = runner.invoke(app, ["server", "start", str(ensure_model(SYNTHETIC_DEFAULT)), "--port", str(port), "-t", "2"])
    try:
        assert started.exit_code == 0, started.output
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
        status = runner.invoke(app, ["server", "status", "--port", str(port)])
        info = json.loads(status.output)
        assert info["running"] and info["health"] == "ok" and info["flags"]["--threads"] == "2"
        assert info["answer"]["predicted_n"] == 4
    finally:
        stopped = runner.invoke(app, ["server", "stop", "--port", str(port)])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert not (Path(os.environ["BYTESUP_STATE"]) / f"server-{port}" / "pid").exists()


# --- lesson options: typed and validated once, at the command line --------------------------------

def test_lesson_options_are_parsed_and_typed():
    from bytesup.run.lessons import check_lesson_options, load_lesson

    capstone = load_lesson("08_capstone_decode_memory_bound").Options
    opts = capstone.parse({"bandwidth_gbs": "273", "sizes": " tiny-q8_0, small-q8_0,, "})
    assert opts.bandwidth_gbs == 273.0 and isinstance(opts.bandwidth_gbs, float)
    assert opts.sizes == ["tiny-q8_0", "small-q8_0"]
    assert opts.given() == {"bandwidth_gbs": 273.0, "sizes": ["tiny-q8_0", "small-q8_0"]}
    assert capstone.parse({}).given() == {}  # the manifest records only the options given
    # A run's options are validated by every lesson of the run that takes them, and recorded as one record.
    checked = check_lesson_options(["01_model_on_disk", "08_capstone_decode_memory_bound"], {"bandwidth_gbs": "273", "sizes": "a,b"})
    assert checked == {"bandwidth_gbs": 273.0, "sizes": ["a", "b"]}


@pytest.mark.parametrize("lesson, args, words", [
    ("04_next_token", ["--bandwidth-gbs", "-1"], "--bandwidth-gbs -1.0 is not valid"),
    ("04_next_token", ["--bandwidth-gbs", "inf"], "give a positive number of GB/s"),
    ("08_capstone_decode_memory_bound", ["--sizes", " , "], "--sizes [] is not valid"),
    ("09_beyond_one_machine", ["--rpc", "127.0.0.1:99999"], "give rpc-server endpoints as host:port"),
    # An option no lesson of the run takes is refused too, naming the lesson that takes it.
    ("04_next_token", ["--sizes", "tiny-q8_0"], "--sizes is an option of 08_capstone_decode_memory_bound, and this run does not"),
])
def test_a_bad_lesson_option_stops_the_run_before_it_starts(tmp_path, lesson, args, words):
    res = runner.invoke(app, ["run", lesson, "--replay", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"), *args])
    assert res.exit_code == 2, res.output
    assert words in " ".join(res.output.split())
    assert not (tmp_path / "run").exists()


def test_each_lesson_declares_its_options_and_the_help_names_the_lessons_that_take_each():
    """The command line's lesson flags are the lessons' Options fields: read back here from the lesson files' text."""
    import re

    from bytesup.paths import lessons_dir
    from bytesup.run.lessons import course_options

    declared: dict[str, list[str]] = {}
    for path in sorted(lessons_dir().glob("[0-9][0-9]_*.py")):
        text = path.read_text(encoding="utf-8")
        if "class Options(LessonOptions):" not in text:
            continue
        body = text[text.index("class Options(LessonOptions):"):]
        body = body[:re.search(r"\n(?=\S)", body).start()]  # to the next line that is not indented
        for name in re.findall(r"^    ([a-z_]+): ", body, flags=re.M):
            declared.setdefault(name, []).append(str(int(path.name[:2])))
    assert declared == {"bandwidth_gbs": ["1", "4", "8"], "prompts": ["4"], "sizes": ["8"], "rpc": ["9"]}
    options = course_options()
    assert {name: [str(int(lid[:2])) for lid in o.lessons] for name, o in options.items()} == declared
    shown = " ".join(runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"}).output.split())
    assert "besides this host's measured one (lessons 1, 4 and 8)" in shown
    assert "(see `bytesup model build --list`) (lesson 8)" in shown and "--prompt" in shown and "(lesson 9)" in shown


def test_run_and_run_all_take_one_run_options_record_with_the_same_flags(monkeypatch):
    import dataclasses
    import inspect

    from bytesup.cli.app import run_all_cmd, run_cmd
    from bytesup.options import RunOptions

    run = list(inspect.signature(run_cmd).parameters)
    run_all = list(inspect.signature(run_all_cmd).parameters)
    shared = [f.name for f in dataclasses.fields(RunOptions) if "cli" in f.metadata]
    assert run[:2] == ["lessons", "print_tables"] and run_all[:2] == ["print_tables", "report"]
    assert run[2:2 + len(shared)] == shared and run[2:] == run_all[2:]  # the same flags, from one record
    seen = {}
    monkeypatch.setattr("bytesup.cli.app._run", lambda ids, options, **kw: seen.update(ids=ids, options=options))
    done = runner.invoke(app, ["run", "01_model_on_disk", "--repeat", "5", "--timeout", "9", "--bandwidth-gbs", "100"])
    assert done.exit_code == 0, done.output
    options = seen["options"]
    assert isinstance(options, RunOptions) and (options.repeat, options.timeout) == (5, 9.0)
    assert options.lesson_options == {"bandwidth_gbs": 100.0}


def test_two_lessons_declaring_one_option_differently_is_an_error():
    from types import ModuleType

    from pydantic import Field

    from bytesup.options import BandwidthGbs, LessonOptions
    from bytesup.run.lessons import option_fields

    class One(LessonOptions):
        bandwidth_gbs: BandwidthGbs = None

    class Other(LessonOptions):
        bandwidth_gbs: float | None = Field(default=None, description="another text")

    def module(options):
        m = ModuleType("m")
        m.Options = options
        return m

    assert option_fields({"01_a": module(One), "02_b": module(One)})["bandwidth_gbs"].lessons == ("01_a", "02_b")
    with pytest.raises(BytesupError, match="both declare the option 'bandwidth_gbs', but differently"):
        option_fields({"01_a": module(One), "02_b": module(Other)})


def test_ctx_options_are_the_lessons_typed_options_and_are_recorded_as_given(tmp_path):
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions
    from bytesup.run.lessons import load_lesson
    from bytesup.store.results import LessonResult
    from bytesup.store.runs import ReplaySource

    capstone = load_lesson("08_capstone_decode_memory_bound").Options
    ctx = LessonContext("t", "t", server=None, run=RunOptions(command=["t"], lesson_options={"bandwidth_gbs": 100}),
                        model_path=None, sink=[], replay=None, progress=Reporter(None, "t"), options_type=capstone)
    assert ctx.options.bandwidth_gbs == 100.0 and ctx.options.sizes is None
    assert ctx.host_values == {"option_sizes": None, "option_bandwidth_gbs": 100.0}  # recorded as the run gave them
    # A replay takes the recorded values, whatever the command line says; one recorded before the option existed is not given.
    recorded = LessonResult(lesson_id="t", title="t", started_at="s", finished_at="f", host_values={"option_sizes": ["tiny-q8_0"]})
    replay = LessonContext("t", "t", server=None, run=RunOptions(command=["t"], lesson_options={"bandwidth_gbs": 5}),
                           model_path=None, sink=[], replay=ReplaySource(result=recorded, exchanges=[]),
                           progress=Reporter(None, "t"), options_type=capstone)
    assert replay.options.sizes == ["tiny-q8_0"] and replay.options.bandwidth_gbs is None
    # A lesson without Options takes none.
    bare = LessonContext("t", "t", server=None, run=RunOptions(command=["t"]), model_path=None, sink=[], replay=None,
                         progress=Reporter(None, "t"))
    assert bare.options.given() == {} and bare.host_values == {}


def test_an_options_help_names_lessons_by_number_and_letter():
    from pydantic.fields import FieldInfo

    from bytesup.run.lessons import OptionField

    field = OptionField("x", "--x", FieldInfo(description="a value"), False, ("04_next_token", "05b_speculative_decoding"))
    assert field.help() == "a value (lessons 4 and 5b)"
    assert OptionField("x", "--x", FieldInfo(description="a value"), False, ("08_capstone",)).help() == "a value (lesson 8)"


def test_ctrl_c_while_bytesup_loads_is_one_line_not_a_traceback():
    """A KeyboardInterrupt no command caught, raised while the command's modules load: one line, status 130."""
    import os
    import subprocess
    import sys

    code = ("import signal, os, sys, importlib.abc, bytesup.cli\n"
            "class Stop(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'bytesup.run.runner':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "        return None\n"
            "sys.meta_path.insert(0, Stop())\n"
            "import bytesup.cli.app\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ})
    assert done.returncode in (130, -2), done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stderr.strip() == ("Stopped by Ctrl-C while bytesup was loading, before it started anything: nothing "
                                   "was run or written.")


def test_a_caught_ctrl_c_keeps_the_commands_exit_status(tmp_path):
    """`python -m bytesup`: an interrupt that passed through code run from a string (as when a dataclass is made
    while a module loads) and was then caught exits with the status the command chose, 130, not killed by SIGINT
    (CPython's mark; `-m` is the way in that honours it, a script or `-c` exits through sys.exit at once)."""
    import os
    import signal
    import subprocess
    import sys

    code = ("import os, signal, sys, bytesup.cli\n"
            "try:\n"
            "    exec('os.kill(os.getpid(), signal.SIGINT)\\nwhile True: pass')\n"
            "except KeyboardInterrupt:\n"
            "    print('caught', file=sys.stderr)\n"
            "sys.exit(130)\n")
    (tmp_path / "caught.py").write_text(code)
    (tmp_path / "caught_bare.py").write_text(code.replace("bytesup.cli", "bytesup"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}

    def run(module: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=120, env=env,
                              cwd=tmp_path)

    done = run("caught")
    assert done.stderr.strip() == "caught"
    assert done.returncode == 130
    assert run("caught_bare").returncode == -signal.SIGINT  # without bytesup.cli: the mark this clears

