"""Host facts that lessons record as host values."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import types

import pytest

from bytesup.errors import BytesupError
from bytesup.host import environment


def test_available_memory_is_psutils_figure_or_none(monkeypatch):
    fake = types.SimpleNamespace(virtual_memory=lambda: types.SimpleNamespace(available=3_000_000_000.0))
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert environment.available_memory() == 3_000_000_000

    def broken():
        raise OSError("no /proc/meminfo in this container")

    monkeypatch.setitem(sys.modules, "psutil", types.SimpleNamespace(virtual_memory=broken))
    assert environment.available_memory() is None


# --- accelerators: an error is reported, never an empty list ------------------------------------------------

def one_paragraph(text: str) -> bool:
    return "\n" not in text.strip() and text.rstrip().endswith(".")


def test_an_embedded_engine_that_cannot_list_its_devices_is_an_error(monkeypatch):
    def broken():
        raise RuntimeError("ggml backend registry not loaded")

    monkeypatch.setitem(sys.modules, "xllamacpp", types.SimpleNamespace(get_device_info=broken))
    with pytest.raises(environment.AcceleratorsUnknown) as caught:
        environment.accelerators("embedded")
    message = str(caught.value)
    assert isinstance(caught.value, BytesupError) and one_paragraph(message)
    assert "RuntimeError: ggml backend registry not loaded" in message and "--n-gpu-layers 0" in message
    listed = [{"name": "CPU", "description": "x86"}, {"name": "CUDA0", "description": "H200"}]
    monkeypatch.setitem(sys.modules, "xllamacpp", types.SimpleNamespace(get_device_info=lambda: listed))
    assert environment.accelerators("embedded") == ["CUDA0 (H200)"]


def nvidia_smi(monkeypatch, returncode: int, stdout: str = "", stderr: str = "") -> None:
    monkeypatch.setattr(environment.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(environment.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, returncode, stdout, stderr))
    monkeypatch.setattr(environment.sys, "platform", "linux")


def test_an_nvidia_smi_that_fails_is_an_error_and_the_manifest_says_so(monkeypatch):
    nvidia_smi(monkeypatch, 9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(environment.AcceleratorsUnknown, match="nvidia-smi failed with exit code 9") as caught:
        environment.accelerators("llama-server")
    assert one_paragraph(str(caught.value)) and "couldn't communicate" in str(caught.value)
    facts = environment.host_facts()
    assert facts["gpus"] is None and "exit code 9" in facts["gpus_error"]  # unknown, not "no GPU"


def test_no_nvidia_smi_is_no_gpu_and_a_working_one_lists_them(monkeypatch):
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)
    monkeypatch.setattr(environment.sys, "platform", "linux")
    assert environment.accelerators("llama-server") == [] and environment.host_facts()["gpus"] == []
    nvidia_smi(monkeypatch, 0, stdout="NVIDIA H200, 143771 MiB, 570.1\n\n")
    assert environment.accelerators("llama-server") == ["NVIDIA H200, 143771 MiB, 570.1"]
    assert "gpus_error" not in environment.host_facts()


@pytest.mark.parametrize(("n_gpu_layers", "stops"), [(None, True), ("99", True), ("0", False)])
def test_where_the_server_decodes_is_never_decided_on_an_unknown_list(monkeypatch, n_gpu_layers, stops):
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    def unknown(engine):
        raise environment.AcceleratorsUnknown("nvidia-smi", "failed with exit code 9")

    monkeypatch.setattr(environment, "accelerators", unknown)
    server = types.SimpleNamespace(base_url="http://127.0.0.1:8099")
    ctx = LessonContext("t", "t", server=server, run=RunOptions(command=["t"]), model_path=None, sink=[],  # type: ignore[arg-type]
                        replay=None, progress=Reporter(None, "t"))
    ctx.identity = {"server": {"engine": "llama-server", "flags": {} if n_gpu_layers is None else {"--n-gpu-layers": n_gpu_layers}}}
    if stops:
        with pytest.raises(environment.AcceleratorsUnknown):
            ctx.server_facts()
        assert "server_facts" not in ctx.host_values
    else:
        facts = ctx.server_facts()
        assert facts["host_bandwidth_applies"] is True and facts["accelerators"] == []
        assert ctx.notes and "failed with exit code 9" in ctx.notes[0] and "--n-gpu-layers 0" in ctx.notes[0]


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


def test_a_file_is_hashed_once_until_it_is_written_again(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"first")
    reads = []
    real = environment._read_digest
    monkeypatch.setattr(environment, "_read_digest", lambda p, size: reads.append(p) or real(p, size))
    first = environment.file_digest(path)
    first["sha256"] = "changed by the caller"
    assert environment.file_digest(path)["sha256"] == hashlib.sha256(b"first").hexdigest()
    assert len(reads) == 1
    path.write_bytes(b"other")  # the same size, written again: another mtime and ctime
    os.utime(path, ns=(1, 1))
    assert environment.file_digest(path)["sha256"] == hashlib.sha256(b"other").hexdigest()
    assert len(reads) == 2
