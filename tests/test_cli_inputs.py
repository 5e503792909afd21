"""Bad input on the command line (bytesup.cli): a usage error or one paragraph that says what to do, a non-zero
exit, and nothing written."""

from __future__ import annotations

import errno
import json

import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.llama import process
from bytesup.options import RunOptions

from faultkit import cli, flat


def words(text: str) -> str:
    """Text as words, without the boxes and line breaks of typer's help and usage errors."""
    return " ".join(text.replace("│", " ").split())


def test_model_build_into_a_folder_or_a_read_only_folder_says_what_to_do(tmp_path, monkeypatch):
    res = cli.invoke(app, ["model", "build", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "is a folder" in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    from bytesup.models import catalog

    def read_only(preset, path, *a, **kw):  # what a folder without write permission answers
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(catalog, "build_model", read_only)
    res = cli.invoke(app, ["model", "build", "tiny-q8_0", "--out", str(tmp_path / "ro" / "m.gguf"), "--force"])
    assert res.exit_code == 1 and "Could not write the model" in flat(res.output), res.output
    assert isinstance(res.exception, SystemExit)


def test_the_default_request_timeout_is_two_minutes_and_help_says_so():
    assert RunOptions().timeout == 120
    res = cli.invoke(app, ["run", "--help"])
    assert "default 120" in words(res.output)


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0"])
def test_bandwidth_must_be_positive_and_finite(value, tmp_path):
    res = cli.invoke(app, ["run", "01_model_on_disk", "--bandwidth-gbs", value, "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "give a positive number" in words(res.output) and not (tmp_path / "run").exists()


def test_check_fails_on_a_run_with_no_results(tmp_path):
    folder = tmp_path / "empty-run"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"schema_version": 1, "kind": "bytesup-run", "status": "incomplete", "lessons": {}}))
    res = cli.invoke(app, ["check", str(folder)])
    assert res.exit_code == 1 and "no lesson results" in flat(res.output)


@pytest.mark.parametrize("value", ["inf", "1e300", "nan", "-1"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(value, tmp_path):
    res = CliRunner().invoke(app, ["run", "01_x", "--timeout", value, "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "Traceback" not in res.output and not isinstance(res.exception, OverflowError)


def test_a_repeat_past_the_limit_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["run", "01_x", "--repeat", "1000000", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "1000" in words(res.output) and "--repeat" in words(res.output)


@pytest.mark.parametrize("port", ["99999", "-1", "0", "http"])
def test_a_port_out_of_range_is_one_paragraph(port, capsys):
    assert process.main(["start", "--port", port]) == 1
    assert "--port must be a whole number from 1 to 65535" in capsys.readouterr().err
    assert process.main(["status", "--port", port]) == 1
