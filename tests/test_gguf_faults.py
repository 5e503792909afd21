"""GGUF files that are not what they claim (bytesup.models.gguf): any bytes after the magic, no tensors, nesting
too deep: a GGUFError of one paragraph, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, HealthCheck, settings, strategies as st

from bytesup.models.gguf import GGUFError, check_gguf, read_model_info

from faultkit import assert_one_paragraph


def degenerate_gguf(path: Path, tensors: list[tuple[str, list[int]]], nested: int = 0) -> Path:
    """A GGUF written by gguf's writer: F32 tensors of the given shapes, and optionally arrays nested `nested` deep."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    value: list = [1]
    for _ in range(nested):
        value = [value]
    if nested:
        writer.add_array("test.nested", value)
    for name, shape in tensors:
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_that_is_not_a_gguf_is_named_without_its_bytes(tmp_path):
    bad = tmp_path / "not.gguf"
    bad.write_text("TOPSECRET and more text to pass the size check\n")
    with pytest.raises(GGUFError) as err:
        check_gguf(bad)
    assert "TOPSECRE" not in str(err.value) and "does not start with the four bytes GGUF" in str(err.value)


def test_a_gguf_without_tensors_or_with_an_empty_one_is_one_paragraph(tmp_path):
    with pytest.raises(GGUFError, match="holds no tensors"):
        read_model_info(degenerate_gguf(tmp_path / "none.gguf", []))
    with pytest.raises(GGUFError, match="with no elements"):
        read_model_info(degenerate_gguf(tmp_path / "empty.gguf", [("token_embd.weight", [0, 4])]))


def test_arrays_nested_too_deep_are_one_paragraph(tmp_path):
    path = degenerate_gguf(tmp_path / "deep.gguf", [("token_embd.weight", [2, 4])], nested=12)
    with pytest.raises(GGUFError, match="nests arrays more than 8 deep"):
        read_model_info(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(min_size=0, max_size=400))
def test_any_bytes_after_the_magic_are_a_gguf_error_never_a_traceback(tmp_path, body):
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + body)
    try:
        read_model_info(path)
    except Exception as exc:  # noqa: BLE001 - whatever it is, it must keep the promise
        assert isinstance(exc, GGUFError)
        assert_one_paragraph(exc)
