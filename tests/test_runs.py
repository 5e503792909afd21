"""Reading a run folder back (bytesup.store.runs): each lesson file is read only where the run wrote it, only as
the lesson it names, and only with the sha256 the manifest recorded for it (where the manifest has one)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.errors import RunFolderError
from bytesup.store.runs import load_replay, load_run, read_manifest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "outputs" / "2026-12-01-cpu2-smollm2"
ONE, TWO = "01_model_on_disk", "02_tokens_and_embeddings"


def words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.fixture
def run(tmp_path) -> Path:
    """Lessons 01 and 02 of a committed run, with a manifest that lists only them."""
    folder = tmp_path / "run"
    (folder / "http").mkdir(parents=True)
    for lid in (ONE, TWO):
        for name in (f"{lid}.json", f"{lid}.md", f"http/{lid}.jsonl"):
            shutil.copy(COMMITTED / name, folder / name)
    manifest = json.loads((COMMITTED / "manifest.json").read_text())
    manifest["lessons"] = {lid: manifest["lessons"][lid] for lid in (ONE, TWO)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def with_hashes(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    for lid, entry in manifest["lessons"].items():
        entry["json_sha256"] = hashlib.sha256((folder / f"{lid}.json").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_folder_of_unchanged_files_loads_with_or_without_hashes(run):
    assert sorted(load_run(run).results) == [ONE, TWO]        # a manifest written before the hashes were kept
    with_hashes(run)
    loaded = load_run(run)
    assert loaded.results[ONE].lesson_id == ONE and loaded.results[TWO].lesson_id == TWO
    assert load_replay(run, ONE, read_manifest(run).lessons[ONE]).result.lesson_id == ONE


def test_a_lesson_json_that_is_a_symlink_is_refused(run, tmp_path):
    other = tmp_path / "other" / f"{ONE}.json"
    other.parent.mkdir()
    shutil.copy(run / f"{ONE}.json", other)
    (run / f"{ONE}.json").unlink()
    (run / f"{ONE}.json").symlink_to(other)
    with pytest.raises(RunFolderError, match="is a symbolic link, not a file of the run folder"):
        load_run(run)
    with pytest.raises(RunFolderError, match="symbolic link"):
        load_replay(run, ONE)


def test_a_recording_or_manifest_that_is_a_symlink_is_refused(run, tmp_path):
    elsewhere = tmp_path / "elsewhere.jsonl"
    shutil.move(run / "http" / f"{ONE}.jsonl", elsewhere)
    (run / "http" / f"{ONE}.jsonl").symlink_to(elsewhere)
    with pytest.raises(RunFolderError, match="recording of 01_model_on_disk was not read"):
        load_replay(run, ONE)
    shutil.move(run / "manifest.json", tmp_path / "manifest.json")
    (run / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(RunFolderError, match="run's manifest was not read"):
        read_manifest(run)


def test_another_lessons_json_under_a_lessons_name_is_refused(run):
    shutil.copy(run / f"{TWO}.json", run / f"{ONE}.json")    # 02's result copied over 01's name
    with pytest.raises(RunFolderError) as err:
        load_run(run)
    assert f"holds the result of '{TWO}', not of {ONE}" in str(err.value)
    with pytest.raises(RunFolderError, match="not of 01_model_on_disk"):
        load_replay(run, ONE)


def test_a_lesson_json_changed_after_the_run_is_refused_where_the_manifest_has_its_hash(run):
    with_hashes(run)
    data = json.loads((run / f"{ONE}.json").read_text())
    data["notes"].append("edited")
    (run / f"{ONE}.json").write_text(json.dumps(data))
    with pytest.raises(RunFolderError, match="has changed since the run wrote it"):
        load_run(run)
    with pytest.raises(RunFolderError, match="sha256 differs"):
        load_replay(run, ONE, read_manifest(run).lessons[ONE])


@pytest.mark.parametrize("command", ["report", "check"])
def test_report_and_check_refuse_a_swapped_lesson_with_one_paragraph(run, command):
    shutil.copy(run / f"{TWO}.json", run / f"{ONE}.json")
    res = CliRunner().invoke(app, [command, str(run)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"holds the result of '{TWO}', not of {ONE}" in words(res.output)
