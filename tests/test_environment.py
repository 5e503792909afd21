"""Host facts that lessons record as host values."""

from __future__ import annotations

import sys
import types

from bytesup.host import environment


def test_available_memory_is_psutils_figure_or_none(monkeypatch):
    fake = types.SimpleNamespace(virtual_memory=lambda: types.SimpleNamespace(available=3_000_000_000.0))
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert environment.available_memory() == 3_000_000_000

    def broken():
        raise OSError("no /proc/meminfo in this container")

    monkeypatch.setitem(sys.modules, "psutil", types.SimpleNamespace(virtual_memory=broken))
    assert environment.available_memory() is None
