"""Files written atomically (bytesup.files), also where the OS lacks a call Linux has."""

from __future__ import annotations

import os

from bytesup.files import write_text_atomic


def test_atomic_write_without_fchmod(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "fchmod")            # Windows, before Python 3.13
    write_text_atomic(tmp_path / "a" / "x.json", "{}\n")
    assert (tmp_path / "a" / "x.json").read_text() == "{}\n"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["x.json"]
