"""bytesup.models.gguf against small GGUF files written here with gguf.GGUFWriter (no model download needed)."""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
import psutil
import pytest
from gguf import GGMLQuantizationType as QT

from bytesup.models.gguf import GGUFError, check_gguf, embedding_row, read_model_info

N_VOCAB, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_CTX = 48, 64, 128, 4, 2, 256

# Element counts by group for the model written below; vocab != n_embd so a swapped shape shows.
GROUPS = {
    "embedding": N_VOCAB * N_EMBD,
    "attention": N_EMBD * N_EMBD,
    "feed_forward": N_FF * N_EMBD,
    "norms": 2 * N_EMBD,
    "output": N_VOCAB * N_EMBD,
    "other": 0,
}
TOTAL = sum(GROUPS.values())


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "token_embd.weight": rng.standard_normal((N_VOCAB, N_EMBD), dtype=np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((N_EMBD, N_EMBD), dtype=np.float32),
        "blk.0.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "blk.0.ffn_up.weight": rng.standard_normal((N_FF, N_EMBD), dtype=np.float32),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": rng.standard_normal((N_VOCAB, N_EMBD), dtype=np.float32),
    }


def write_model(path, qtype: QT, tokens: bool = False) -> dict[str, np.ndarray]:
    """Write a one-layer llama GGUF; 2-D weights in `qtype`, norms in F32 as llama.cpp keeps them."""
    weights = _weights()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-test")
    w.add_block_count(1)
    w.add_embedding_length(N_EMBD)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_feed_forward_length(N_FF)
    w.add_context_length(N_CTX)
    ftype = {QT.F16: gguf.LlamaFileType.MOSTLY_F16, QT.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0}[qtype]
    w.add_file_type(int(ftype))
    if tokens:
        w.add_token_list([f"t{i}" for i in range(N_VOCAB)])
    for name, arr in weights.items():
        if arr.ndim == 1:
            w.add_tensor(name, arr)
        elif qtype == QT.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights


@pytest.fixture(params=[QT.F16, QT.Q8_0], ids=["F16", "Q8_0"])
def model(request, tmp_path):
    path = tmp_path / f"tiny-{request.param.name}.gguf"
    weights = write_model(path, request.param)
    return path, request.param, weights


def test_totals_and_hyperparameters(model):
    path, qtype, _ = model
    info = read_model_info(path)
    assert info["architecture"] == "llama"
    assert info["name"] == "tiny-test"
    assert info["file_type"]["name"] == f"MOSTLY_{qtype.name}"
    assert info["file_size_bytes"] == os.path.getsize(path)
    hp = info["hyperparameters"]
    assert hp["n_layer"] == 1
    assert hp["n_embd"] == N_EMBD
    assert (hp["n_head"], hp["n_head_kv"], hp["head_dim"]) == (N_HEAD, N_HEAD_KV, N_EMBD // N_HEAD)
    assert hp["n_ff"] == N_FF
    assert hp["n_vocab"] == N_VOCAB  # no tokenizer here: falls back to the embedding's rows
    assert hp["n_ctx_train"] == N_CTX
    assert hp["rope_freq_base"] == 10000.0 and hp["rope_freq_base_default"] is True

    assert info["n_params"] == TOTAL == sum(t["n_elements"] for t in info["tensors"])
    assert sum(info["bytes_by_type"].values()) == info["tensor_bytes"] == sum(t["n_bytes"] for t in info["tensors"])
    assert sum(info["params_by_type"].values()) == TOTAL
    assert info["params_by_group"] == GROUPS
    assert sum(info["params_by_group"].values()) == info["n_params"]

    n_2d = TOTAL - 2 * N_EMBD
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    assert info["bytes_by_type"] == {qtype.name: n_2d // block * type_size, "F32": 2 * N_EMBD * 4}
    by_name = {t["name"]: t for t in info["tensors"]}
    # ne order: the contiguous row length (n_embd) comes first.
    assert by_name["token_embd.weight"]["shape"] == [N_EMBD, N_VOCAB]
    assert by_name["blk.0.ffn_up.weight"]["shape"] == [N_EMBD, N_FF]
    assert by_name["blk.0.attn_norm.weight"]["type"] == "F32"
    # What gets recorded must survive a JSON round trip unchanged.
    assert json.loads(json.dumps(info)) == info


def test_agrees_with_gguf_reader(model):
    path, _, _ = model
    info = read_model_info(path)
    reader = gguf.GGUFReader(path)
    assert info["data_offset"] == reader.data_offset
    assert len(info["tensors"]) == len(reader.tensors)
    for mine, theirs in zip(info["tensors"], reader.tensors, strict=True):
        assert mine["name"] == theirs.name
        assert mine["shape"] == [int(d) for d in theirs.shape]
        assert mine["type"] == theirs.tensor_type.name
        assert mine["n_elements"] == theirs.n_elements
        assert mine["n_bytes"] == theirs.n_bytes
        assert mine["offset"] == theirs.data_offset
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        assert info["metadata"][key] == fld.contents(), key


def test_vocab_from_tokenizer(tmp_path):
    path = tmp_path / "tok.gguf"
    write_model(path, QT.F16, tokens=True)
    info = read_model_info(path)
    assert info["hyperparameters"]["n_vocab"] == N_VOCAB
    assert info["metadata"]["tokenizer.ggml.tokens"] == {"array_of": "STRING", "length": N_VOCAB}


def test_embedding_row_matches_original(model):
    path, qtype, weights = model
    emb = weights["token_embd.weight"]
    reader = gguf.GGUFReader(path)
    stored = next(t for t in reader.tensors if t.name == "token_embd.weight")
    full = gguf.quants.dequantize(stored.data, qtype).reshape(N_VOCAB, N_EMBD)
    for token in (0, 1, 17, N_VOCAB - 1):
        row = np.array(embedding_row(path, token), dtype=np.float32)
        assert row.shape == (N_EMBD,)
        # Same bytes, same dequantizer: equal to dequantizing the whole tensor.
        np.testing.assert_array_equal(row, full[token])
        if qtype == QT.F16:
            np.testing.assert_array_equal(row, emb[token].astype(np.float16).astype(np.float32))
        else:
            # Q8_0 rounds each value to 1/127 of its block's largest magnitude.
            assert np.max(np.abs(row - emb[token])) <= 0.01 * np.max(np.abs(emb[token]))


@pytest.mark.parametrize("bad", [-1, N_VOCAB, 10**9, "3", 1.0, True])
def test_embedding_row_out_of_range(tmp_path, bad):
    path = tmp_path / "m.gguf"
    write_model(path, QT.F16)
    with pytest.raises(GGUFError, match="out of range"):
        embedding_row(path, bad)


def _assert_rejected(path, words: str):
    for call in (check_gguf, read_model_info, lambda p: embedding_row(p, 0)):
        with pytest.raises(GGUFError) as exc:
            call(path)
        assert str(path) in str(exc.value)
        assert words in str(exc.value)
        assert "bytesup model build" in str(exc.value)


def test_text_file_is_rejected(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("This is not a model, just some notes.\n")
    _assert_rejected(path, "is not a GGUF file")


def test_empty_file_is_rejected(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    _assert_rejected(path, "is empty")


def test_missing_file_is_rejected(tmp_path):
    _assert_rejected(tmp_path / "nowhere.gguf", "does not exist")


@pytest.mark.parametrize("cut", [100, 5000])
def test_truncated_file_is_rejected(tmp_path, cut):
    path = tmp_path / "cut.gguf"
    write_model(path, QT.Q8_0)
    # More than the 32-byte alignment padding, so real tensor bytes are lost.
    os.truncate(path, os.path.getsize(path) - cut)
    _assert_rejected(path, "truncated")


def test_header_cut_short_is_rejected(tmp_path):
    path = tmp_path / "head.gguf"
    write_model(path, QT.F16, tokens=True)
    os.truncate(path, 200)  # inside the metadata
    _assert_rejected(path, "truncated")


def test_tensor_data_is_not_loaded(tmp_path):
    """A 1 GiB sparse model is described without mapping its data into memory."""
    n_vocab, n_embd = 131072, 4096
    path = tmp_path / "sparse.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(n_embd)
    nbytes = n_vocab * n_embd * 2
    w.add_tensor_info("token_embd.weight", (n_vocab, n_embd), np.dtype(np.float16), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data_start = -(-os.path.getsize(path) // 32) * 32
    os.truncate(path, data_start + nbytes)  # a hole: no disk blocks, but any read would fault pages in

    proc = psutil.Process()
    before = proc.memory_info().rss
    info = read_model_info(path)
    row = embedding_row(path, n_vocab - 1)
    grown = proc.memory_info().rss - before
    assert info["tensor_bytes"] == nbytes and info["data_offset"] == data_start
    assert row == [0.0] * n_embd
    assert grown < 32 * 2**20, f"RSS grew by {grown} bytes"


def test_a_version_field_no_writer_uses_is_not_echoed(tmp_path):
    path = tmp_path / "tops.gguf"
    path.write_bytes(b"GGUFTOPSECRET, and more of another file's text" * 2)
    with pytest.raises(GGUFError) as err:
        check_gguf(path)
    text = str(err.value)
    assert "1397772116" not in text and "TOPS" not in text and "no GGUF version any writer uses" in text
    path.write_bytes(b"GGUF" + (7).to_bytes(4, "little") + bytes(40))
    with pytest.raises(GGUFError, match="is GGUF version 7, which this reader does not handle"):
        check_gguf(path)
