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
    from bytesup.options import LessonOptions, RunOptions

    opts = LessonOptions.parse({"bandwidth_gbs": "273", "sizes": " tiny-q8_0, small-q8_0,, "})
    assert opts.bandwidth_gbs == 273.0 and isinstance(opts.bandwidth_gbs, float)
    assert opts.sizes == ["tiny-q8_0", "small-q8_0"]
    assert opts.given() == {"bandwidth_gbs": 273.0, "sizes": ["tiny-q8_0", "small-q8_0"]}
    assert LessonOptions.parse({}).given() == {}  # the manifest records only the options given
    # RunOptions validates a plain dict the same way.
    assert RunOptions(command=["t"], lesson_options={"sizes": "a,b"}).lesson_options.sizes == ["a", "b"]


@pytest.mark.parametrize("args, words", [
    (["--bandwidth-gbs", "-1"], "--bandwidth-gbs -1.0 is not valid"),
    (["--bandwidth-gbs", "inf"], "give a positive number of GB/s"),
    (["--sizes", " , "], "--sizes"),
])
def test_a_bad_lesson_option_stops_the_run_before_it_starts(tmp_path, args, words):
    res = runner.invoke(app, ["run", "04_next_token", "--replay", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"), *args])
    assert res.exit_code == 2, res.output
    assert words in " ".join(res.output.split())
    assert not (tmp_path / "run").exists()


def test_ctx_option_returns_the_typed_value_and_records_it_as_given(tmp_path):
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    ctx = LessonContext("t", "t", server=None, options=RunOptions(command=["t"], lesson_options={"bandwidth_gbs": 100}),
                        model_path=None, sink=[], replay=None, progress=Reporter(None, "t"))
    assert ctx.option("bandwidth_gbs") == 100.0 and ctx.option("sizes") is None
    assert ctx.host_values == {"option_bandwidth_gbs": 100.0, "option_sizes": None}  # recorded exactly as today
    assert ctx.option("sizes", ["x"]) == ["x"]
    with pytest.raises(BytesupError, match="no_such_option"):
        ctx.option("no_such_option")
