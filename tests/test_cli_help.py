"""Every command's --help at a fixed terminal width: prose wrapped into whole paragraphs, flags and defaults shown whole."""

from __future__ import annotations

import runpy
import sys
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.run.lessons import course_options, discover_lessons

HEADINGS = ("Arguments:", "Options:", "Commands:")


def command_paths(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The words that reach each command and group of the app: (), ("run",), ("model", "derive"), …"""
    found = [path]
    if isinstance(group, TyperGroup):
        for name, sub in sorted(group.commands.items()):
            found += command_paths(sub, (*path, name))
    return found


PATHS = command_paths(typer.main.get_command(app))


def command_at(path: tuple[str, ...]) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def shown_help(path: tuple[str, ...], columns: int) -> list[str]:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.output.splitlines()]


def description(lines: list[str]) -> list[list[str]]:
    """The paragraphs between the usage line and the first list (arguments, options, commands)."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    body: list[str] = []
    for line in lines[start:]:
        if line.strip() in HEADINGS or line.lstrip().startswith("╭"):
            break
        body.append(line)
    paragraphs: list[list[str]] = [[]]
    for line in body:
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "bytesup")
def test_help_wraps_each_paragraph_whole_and_cuts_no_flag(path, columns):
    lines = shown_help(path, columns)
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    paragraphs = description(lines)
    assert paragraphs, lines
    width = max(len(line) for p in paragraphs for line in p)
    for paragraph in paragraphs:
        if any(line.startswith("   ") for line in paragraph):
            continue  # a block printed as written (a table, commands to type)
        for line, after in zip(paragraph, paragraph[1:], strict=False):
            word = after.split()[0]
            # A line ends only where the next word would not fit: no sentence broken early, no paragraph run on.
            assert len(line) + (0 if line.endswith("-") else 1) + len(word) > width, (line, after)
    words = {word.rstrip(",") for word in " ".join(lines).split()}
    for param in command_at(path).params:
        for flag in (*param.opts, *param.secondary_opts) if isinstance(param, TyperOption) else ():
            assert flag in words, f"{flag} is not shown whole"


def test_a_block_marked_to_keep_its_lines_keeps_them():
    lines = shown_help(("model", "derive"), 80)
    text = "\n".join(lines)
    assert "  Widths (--widths, comma-separated):\n    f32   4 bytes a weight (F32)\n    f16   2 bytes a weight (F16)\n" in text
    assert "    M=models/deepseek-coder-6.7b-instruct\n    bytesup model derive $M.Q8_0.gguf --widths f16,q4_0\n" in text


def test_the_runs_default_server_is_shown_whole_at_80_columns():
    assert "http://127.0.0.1:8099)" in " ".join(shown_help(("run",), 80)).split()


@pytest.mark.parametrize("lesson_id", list(discover_lessons()))
def test_a_lesson_scripts_help_names_the_script_and_the_options_it_takes(lesson_id, monkeypatch, capsys):
    script = discover_lessons()[lesson_id]
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(script), run_name="__main__")  # what `python lessons/NN_name.py --help` runs
    assert stopped.value.code == 0
    shown = capsys.readouterr().out
    lines = [line.rstrip() for line in shown.splitlines()]
    assert lines[0] == f"Usage: python lessons/{lesson_id}.py [OPTIONS]"
    assert lines[2].startswith(f"  Lesson {lesson_id[:3].lstrip('0').rstrip('_')} — ")
    words = {word.rstrip(",") for word in shown.split()}
    for option in course_options().values():
        assert (option.flag in words) == (lesson_id in option.lessons), option.flag
    assert "--server" in words and "--replay" in words and "--no-print" in words
    assert all(len(line) <= 80 for line in lines)
