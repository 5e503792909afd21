"""The run manifest as a file (bytesup.store.manifest, bytesup.store.runs.read_manifest): a damaged one, any JSON,
and schema versions of the manifest and of results kept apart; known fields typed, unknown ones kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, HealthCheck, settings, strategies as st
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.errors import RunFolderError, SchemaError
from bytesup.store.runs import read_manifest

from faultkit import assert_one_paragraph, cli, lessons_dir, live_run, ROOT  # noqa: F401 (lessons_dir is a fixture)
from test_runner import lessons  # noqa: F401 (lessons is a fixture)


def write_manifest(folder: Path, data) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(data))
    return folder


def _trap(kind):
    def step(data):
        raise AssertionError(f"a {kind}'s upgrade step ran on the other kind of file")
    return step


def _step(kind, to, ran):
    def step(data):
        ran.append(kind)
        return {**data, "schema_version": to}
    return step


def committed_manifests() -> list[Path]:
    return sorted([*ROOT.glob("outputs/*/manifest.json"), *ROOT.glob("tests/fixtures/runs/*/manifest.json")])


def test_a_damaged_manifest_is_one_clear_error_not_a_traceback(lessons, tmp_path, httpx_mock):
    live = live_run(httpx_mock, tmp_path)
    (live / "manifest.json").write_text("{bad", encoding="utf-8")
    result = cli.invoke(app, ["run", "01_tokens", "--replay", str(live), "--out", str(tmp_path / "replayed")])
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no exception escaped
    assert "manifest.json is not valid JSON" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "replayed").exists()


@pytest.mark.parametrize("data", [[], [1, 2], "text", {"schema_version": 0}, {"schema_version": -5},
                                  {"schema_version": True}, {"schema_version": 1, "lessons": {"../../x": {}}},
                                  {"schema_version": 1, "lessons": {"01_a": "ok"}}, {"schema_version": 1, "lessons": []}])
def test_a_damaged_manifest_is_one_paragraph(tmp_path, data):
    with pytest.raises((RunFolderError, SchemaError)):
        read_manifest(write_manifest(tmp_path / "run", data))


def test_a_resume_into_a_damaged_manifest_is_one_paragraph(tmp_path, lessons_dir):
    out = write_manifest(tmp_path / "run", [1])
    res = CliRunner().invoke(app, ["run", "02_quick", "--out", str(out), "--resume", "--replay", str(out)])
    assert res.exit_code == 1 and "not an object" in res.output and res.exception is None or isinstance(res.exception, SystemExit)


def test_a_deeply_nested_manifest_is_one_paragraph(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunFolderError, match="too deeply"):
        read_manifest(folder)


def test_a_manifest_schema_bump_never_runs_a_result_step(monkeypatch):
    from bytesup.store import manifest, results
    from bytesup.store.runs import load_run

    ran: list[str] = []
    monkeypatch.setattr(manifest, "MANIFEST_SCHEMA_VERSION", 2)
    monkeypatch.setitem(manifest.MANIFEST_UPGRADES, 1, _step("manifest", 2, ran))
    monkeypatch.setitem(results.UPGRADES, 1, _trap("result"))
    run = load_run(ROOT / "tests" / "fixtures" / "runs" / "01_model_on_disk")
    assert ran == ["manifest"] and run.manifest.schema_version == 2
    assert list(run.results) == ["01_model_on_disk"] and run.results["01_model_on_disk"].lesson_id == "01_model_on_disk"


def test_a_result_schema_bump_never_runs_a_manifest_step(monkeypatch):
    from bytesup.store import manifest, results
    from bytesup.store.runs import load_run

    ran: list[str] = []
    monkeypatch.setattr(results, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(results.UPGRADES, 1, _step("result", 2, ran))
    monkeypatch.setitem(manifest.MANIFEST_UPGRADES, 1, _trap("manifest"))
    run = load_run(ROOT / "tests" / "fixtures" / "runs" / "01_model_on_disk")
    assert ran == ["result"] and run.manifest.schema_version == 1 and run.results["01_model_on_disk"].schema_version == 2


def test_each_kind_refuses_a_version_only_the_other_kind_has(monkeypatch, tmp_path):
    """A results step for version 1 does not make a version-1 manifest readable by a bytesup at manifest version 2."""
    from bytesup.store import manifest, results

    monkeypatch.setattr(manifest, "MANIFEST_SCHEMA_VERSION", 2)
    monkeypatch.setitem(results.UPGRADES, 1, _trap("result"))
    with pytest.raises(SchemaError, match="run manifest schema version 1, which no bytesup ever wrote"):
        read_manifest(write_manifest(tmp_path / "run", {"schema_version": 1, "lessons": {}}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                         lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                         max_leaves=20))
def test_any_json_as_a_manifest_is_a_manifest_or_one_paragraph(tmp_path, data):
    folder = write_manifest(tmp_path / "fuzz", data)
    try:
        read_manifest(folder)
    except Exception as exc:  # noqa: BLE001 - whatever it is, it must keep the promise
        assert isinstance(exc, (RunFolderError, SchemaError))
        assert_one_paragraph(exc)


@pytest.mark.parametrize("path", committed_manifests(), ids=lambda p: p.parent.name)
def test_every_committed_manifest_reads_and_writes_back_unchanged(path):
    from bytesup.store.manifest import Manifest

    data = json.loads(path.read_text(encoding="utf-8"))
    manifest = Manifest.parse(json.loads(json.dumps(data)), str(path))
    assert manifest.to_json() == data
    assert manifest.kind == "bytesup-run" and all(e.status == "ok" for e in manifest.lessons.values())


def test_fields_this_bytesup_does_not_know_are_kept_and_written_back(tmp_path):
    from bytesup.store.manifest import Manifest

    data = {"schema_version": 1, "kind": "bytesup-run", "from_a_newer_bytesup": {"x": [1, None]},
            "host": {"hostname": "h", "numa_nodes": 2}, "lessons": {"01_a": {"status": "ok", "json": "01_a.json", "tokens": 7}}}
    manifest = read_manifest(write_manifest(tmp_path / "run", data))
    assert manifest.host.hostname == "h" and manifest.lessons["01_a"].json_file == "01_a.json"
    manifest.lessons["01_a"].seconds = 1.5
    written = manifest.to_json()
    assert written["from_a_newer_bytesup"] == {"x": [1, None]} and written["host"] == {"hostname": "h", "numa_nodes": 2}
    assert written["lessons"]["01_a"] == {"status": "ok", "json": "01_a.json", "seconds": 1.5, "tokens": 7}
    assert Manifest.parse(written, "again").to_json() == written


@pytest.mark.parametrize("data, where", [({"schema_version": 1, "host": {"cores": "many"}}, "host.cores"),
                                         ({"schema_version": 1, "command": "bytesup run"}, "command"),
                                         ({"schema_version": 1, "lessons": {"01_a": {"seconds": "long"}}}, "lessons.01_a.seconds")])
def test_a_known_field_of_the_wrong_type_is_one_paragraph_that_names_it(tmp_path, data, where):
    with pytest.raises(RunFolderError, match=rf"is not a run manifest this bytesup can read: {re.escape(where)}: ") as caught:
        read_manifest(write_manifest(tmp_path / "run", data))
    assert "\n" not in str(caught.value) and "re-run the lessons into a new folder" in str(caught.value)
