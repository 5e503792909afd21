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


# --- other platforms: no /proc, no load average -----------------------------------------------------------------------

def test_the_cpu_name_without_proc(monkeypatch):
    import sys
    from pathlib import Path

    from bytesup.host import environment

    def no_proc(self, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "read_text", no_proc)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(environment, "_run", lambda cmd, cwd=None: "Apple M2 Pro" if cmd[-1] == "machdep.cpu.brand_string" else None)
    assert environment.cpu_model() == "Apple M2 Pro"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(environment.platform, "processor", lambda: "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel")
    assert environment.cpu_model() == "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel"


def test_no_load_average_where_the_os_keeps_none(monkeypatch):
    import os

    from bytesup.host import environment

    monkeypatch.delattr(os, "getloadavg")    # Windows
    assert environment.load_average() is None
