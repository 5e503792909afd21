"""Shared test setup: outputs and server state go to temporary folders, never the repository's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _isolated_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("BYTESUP_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("BYTESUP_SERVER", raising=False)
    monkeypatch.delenv("BYTESUP_API_KEY", raising=False)


def load_fixture(name: str) -> dict:
    """A response recorded from the real embedded server by scripts/record_fixtures.py.
    A missing fixture fails the test: fixtures are never written by tests."""
    path = FIXTURES / "server" / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))
