"""The default model builder: determinism, sizes, parameter counts and a real tokenizer."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from bytesup.models import catalog
from bytesup.models.catalog import DEFAULT_MODEL, PRESETS, SYNTHETIC_DEFAULT, Preset, build_model, file_sha256

TINY = "tiny-q8_0"

# The same bytes on every machine. This changes only when the builder, the preset
# or the shipped tokenizer changes on purpose; then update it from file_sha256().
TINY_SHA256 = "88941aab315a91020f29b722a0ff18b5c0068d1845177e5251299f310adb7842"

ROUND_TRIP_TEXTS = [
    "The capital of France is Paris",
    "def fibonacci(n):\n    if n == 0:",
    "x == y",
    "café 東京 123",
    "for (int i = 0; i < n; i++) {\n\ttotal += a[i];\n}",
    "  two leading spaces, a trailing one ",
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_model(TINY, tmp_path_factory.mktemp("tiny") / f"{TINY}.gguf")


def _reader(path: Path):
    import gguf

    return gguf.GGUFReader(path)


# --------------------------------------------------------------------------- presets


def test_presets_are_consistent():
    assert SYNTHETIC_DEFAULT in PRESETS and DEFAULT_MODEL not in PRESETS
    for name, p in PRESETS.items():
        size, wtype = name.split("-")
        assert p.name == name
        assert wtype == p.weight_type.lower()
        assert p.n_ctx == 4096
        assert p.head_dim * p.n_head == p.n_embd
        assert p.n_vocab == 4096
        # Same shapes for every weight type of a size; only the bytes differ.
        for other in ("q8_0", "f16", "q4_1", "f32"):
            twin = PRESETS[f"{size}-{other}"]
            assert (p.n_layer, p.n_embd, p.n_ff, p.n_params) == (twin.n_layer, twin.n_embd, twin.n_ff, twin.n_params)
    assert [n for n in PRESETS if n.startswith("medium-")] == ["medium-q8_0", "medium-f16", "medium-q4_1", "medium-f32"]
    mb = {n: p.est_file_bytes / 1e6 for n, p in PRESETS.items()}
    assert mb["tiny-q8_0"] < 10
    assert 30 <= mb["small-q8_0"] <= 60
    assert 200 <= mb["medium-q8_0"] <= 300
    assert 900 <= mb["large-q8_0"] <= 1500
    # Bytes per weight, norms aside: Q4_1 20 for 32, Q8_0 34 for 32, F16 2, F32 4.
    medium = {t: PRESETS[f"medium-{t}"] for t in ("q4_1", "q8_0", "f16", "f32")}
    norms = sum(math.prod(shape) for name, shape in catalog.tensor_shapes(medium["f16"]) if name.endswith("norm.weight"))
    weights = medium["f16"].n_params - norms
    for t, per_weight in (("q4_1", 20 / 32), ("q8_0", 34 / 32), ("f16", 2), ("f32", 4)):
        assert medium[t].tensor_bytes == weights * per_weight + 4 * norms


def test_preset_validation():
    with pytest.raises(ValueError):
        Preset("bad", n_layer=1, n_embd=100, n_head=3, n_head_kv=3, n_ff=256)
    with pytest.raises(ValueError):  # Q8_0 needs widths that divide by 32
        Preset("bad", n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=688, weight_type="Q8_0")
    Preset("ok", n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=688, weight_type="F16")
    with pytest.raises(ValueError):  # so does Q4_1
        Preset("bad", n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=688, weight_type="Q4_1")
    with pytest.raises(ValueError):
        Preset("bad", n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=704, weight_type="Q5_0")
    Preset("ok", n_layer=1, n_embd=256, n_head=4, n_head_kv=4, n_ff=688, weight_type="F32")
    with pytest.raises(KeyError):
        catalog.get_preset("no-such-model")


def test_default_model_path(monkeypatch, tmp_path):
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path))
    assert catalog.default_model_path() == tmp_path / "smollm2-135m-q4_1.gguf"
    assert catalog.default_model_path("small-f16") == tmp_path / "small-f16.gguf"


def test_preset_rows():
    rows = catalog.preset_rows()
    assert [r["name"] for r in rows] == catalog.model_names() == [*catalog.smollm2.REAL_MODELS, *PRESETS]
    assert [r["name"] for r in rows if r["default"]] == [DEFAULT_MODEL]
    assert [r["name"] for r in rows if r["synthetic"]] == list(PRESETS)
    for r in rows:
        assert {"weight_type", "n_layer", "n_embd", "n_head", "n_ff", "tensor_mb", "description"} <= r.keys()


# --------------------------------------------------------------------------- the file


def test_build_is_deterministic(tmp_path, tiny_model):
    other = build_model(TINY, tmp_path / "elsewhere" / "copy.gguf")
    assert other != tiny_model
    assert file_sha256(other) == file_sha256(tiny_model) == TINY_SHA256
    # Nothing but the final file is left behind.
    assert [f.name for f in other.parent.iterdir()] == ["copy.gguf"]


def test_sizes_match_the_preset(tiny_model):
    p = PRESETS[TINY]
    reader = _reader(tiny_model)
    assert sum(int(t.n_bytes) for t in reader.tensors) == p.tensor_bytes
    # The estimate covers the metadata too, to within a few hundred bytes.
    assert abs(tiny_model.stat().st_size - p.est_file_bytes) < 4096


def test_params_and_shapes_match(tiny_model):
    import gguf

    p = PRESETS[TINY]
    reader = _reader(tiny_model)
    assert sum(int(t.n_elements) for t in reader.tensors) == p.n_params
    expected = dict(catalog.tensor_shapes(p))
    assert [t.name for t in reader.tensors] == list(expected)
    for t in reader.tensors:
        # GGUF lists dimensions innermost first: the reverse of the NumPy shape.
        assert tuple(int(x) for x in t.shape) == tuple(reversed(expected[t.name]))
        want = gguf.GGMLQuantizationType.F32 if t.name.endswith("norm.weight") else gguf.GGMLQuantizationType.Q8_0
        assert t.tensor_type == want


@pytest.fixture(scope="module")
def tiny_widths(tmp_path_factory) -> dict[str, Path]:
    """tiny in every weight type: the same random values stored four ways."""
    folder = tmp_path_factory.mktemp("widths")
    return {t: build_model(f"tiny-{t}", folder / f"tiny-{t}.gguf") for t in ("q8_0", "f16", "q4_1", "f32")}


def test_every_weight_type_stores_the_same_values(tiny_widths):
    import gguf
    from gguf import quants

    read = {t: _reader(path) for t, path in tiny_widths.items()}
    for t, reader in read.items():
        p = PRESETS[f"tiny-{t}"]
        assert sum(int(x.n_bytes) for x in reader.tensors) == p.tensor_bytes
        assert int(reader.fields["general.file_type"].parts[-1][0]) == p.file_type
        want = gguf.GGMLQuantizationType[p.weight_type]
        assert {x.tensor_type for x in reader.tensors if not x.name.endswith("norm.weight")} == {want}
    name = "blk.0.ffn_up.weight"

    def values(t: str) -> np.ndarray:
        tensor = next(x for x in read[t].tensors if x.name == name)
        return quants.dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape(-1).astype(np.float32)

    exact = values("f32")
    assert exact.std() == pytest.approx(catalog.INIT_STD, rel=0.1)
    assert np.array_equal(values("f16"), exact.astype(np.float16).astype(np.float32))
    # Each block of 32 keeps its values to within about half its step (the step itself is stored as a float16):
    # Q8_0's step is max |x| ÷ 127, Q4_1's (max − min) ÷ 15.
    blocks = exact.reshape(-1, 32)
    q8_step = np.abs(blocks).max(axis=1, keepdims=True) / 127
    assert (np.abs(values("q8_0").reshape(-1, 32) - blocks) <= 0.6 * q8_step).all()
    q4_step = (blocks.max(axis=1, keepdims=True) - blocks.min(axis=1, keepdims=True)) / 15
    assert (np.abs(values("q4_1").reshape(-1, 32) - blocks) <= 0.6 * q4_step + 1e-4).all()
    assert not np.array_equal(values("q4_1"), values("q8_0"))


def test_metadata(tiny_model):
    reader = _reader(tiny_model)
    p = PRESETS[TINY]

    def value(key):
        return reader.get_field(key).contents()

    assert value("general.architecture") == "llama"
    assert value("general.name") == f"bytesup-{TINY}"
    assert value("llama.context_length") == p.n_ctx
    assert value("llama.embedding_length") == p.n_embd
    assert value("llama.block_count") == p.n_layer
    assert value("llama.feed_forward_length") == p.n_ff
    assert value("llama.attention.head_count") == p.n_head
    assert value("llama.attention.head_count_kv") == p.n_head_kv
    assert value("llama.rope.dimension_count") == p.head_dim
    assert value("tokenizer.ggml.model") == "gpt2"
    assert value("tokenizer.ggml.pre") == "gpt-2"
    tokens = value("tokenizer.ggml.tokens")
    assert len(tokens) == p.n_vocab
    assert tokens[value("tokenizer.ggml.bos_token_id")] == "<s>"
    assert tokens[value("tokenizer.ggml.eos_token_id")] == "</s>"
    assert len(value("tokenizer.ggml.merges")) == len(catalog.load_tokenizer().merges)


def test_weights_look_random(tiny_model):
    import gguf

    reader = _reader(tiny_model)
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_up.weight")
    w = gguf.quants.dequantize(t.data, t.tensor_type)
    assert w.shape == (PRESETS[TINY].n_ff, PRESETS[TINY].n_embd)
    assert abs(float(w.mean())) < 1e-3
    assert math.isclose(float(w.std()), catalog.INIT_STD, rel_tol=0.02)
    norm = next(t for t in reader.tensors if t.name == "output_norm.weight")
    assert np.all(norm.data == 1.0)


def test_interrupted_build_leaves_nothing(tmp_path):
    def stop(message, fraction):
        if fraction > 0.5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_model(TINY, tmp_path / "m.gguf", progress=stop)
    assert list(tmp_path.iterdir()) == []


def test_ensure_model_builds_once(tmp_path):
    out = tmp_path / "m.gguf"
    assert catalog.ensure_model(TINY, out) == out
    mtime = out.stat().st_mtime_ns
    assert catalog.ensure_model(TINY, out) == out
    assert out.stat().st_mtime_ns == mtime


def test_shipped_tokenizer_matches_hf_tokenizers():
    """The vocabulary and merges, loaded by the reference implementation, encode like GPT-2."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = catalog.data_dir() / "tokenizer"
    bpe = tokenizers.models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
    tok = tokenizers.Tokenizer(bpe)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    for text in ROUND_TRIP_TEXTS:
        assert tok.decode(tok.encode(text).ids) == text
    assert tok.encode(" Paris").ids != tok.encode("Paris").ids


# --------------------------------------------------------------------------- llama.cpp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tiny_model):
    xllamacpp = pytest.importorskip("xllamacpp")
    httpx = pytest.importorskip("httpx")
    p = xllamacpp.CommonParams()
    p.model.path = str(tiny_model)
    p.hostnames = ["127.0.0.1"]
    p.port = _free_port()
    p.n_ctx = 512
    p.n_parallel = 1
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    p.endpoint_props = True
    server = xllamacpp.Server(p)
    client = httpx.Client(base_url=f"http://127.0.0.1:{p.port}", timeout=30)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("llama.cpp server did not become healthy")
        time.sleep(0.1)
    yield client
    client.close()
    del server


def _tokenize(client, text: str) -> list[int]:
    r = client.post("/tokenize", json={"content": text, "with_pieces": True})
    r.raise_for_status()
    items = r.json()["tokens"]
    return [item["id"] if isinstance(item, dict) else item for item in items]


@pytest.mark.integration
def test_llama_cpp_round_trip(llama_server, tiny_model):
    client = llama_server
    for text in ROUND_TRIP_TEXTS:
        ids = _tokenize(client, text)
        assert ids and all(0 <= i < PRESETS[TINY].n_vocab for i in ids)
        r = client.post("/detokenize", json={"tokens": ids})
        r.raise_for_status()
        assert r.json()["content"] == text, (text, ids)
    assert _tokenize(client, " Paris") != _tokenize(client, "Paris")
    # A real BPE: common words are single tokens, not bytes.
    assert len(_tokenize(client, "The capital of France is Paris")) <= 8


@pytest.mark.integration
def test_llama_cpp_props(llama_server):
    r = llama_server.get("/props")
    r.raise_for_status()
    props = r.json()
    assert props["default_generation_settings"]["n_ctx"] == 512


@pytest.mark.integration
@pytest.mark.parametrize("weight_type", ["q4_1", "f32"])
def test_llama_cpp_serves_the_new_weight_types(tiny_widths, weight_type):
    """llama.cpp loads a synthetic model stored as Q4_1 or F32, reads its bytes as the preset counts them, and
    decodes with it."""
    from bytesup.llama import process
    from bytesup.llama.client import LlamaServer

    port = process.free_port()
    started = process.start_server(tiny_widths[weight_type], ["--port", str(port), "-c", "256"])
    try:
        server = LlamaServer(started.url)
        done = server.completion("The capital of France is", n_predict=4, temperature=0, seed=42)
        assert done.timings.predicted_n == 4
        meta = server.served_meta()  # llama.cpp's own count of the file's tensor bytes and weights
        preset = PRESETS[f"tiny-{weight_type}"]
        assert (meta["size"], meta["n_params"]) == (preset.tensor_bytes, preset.n_params)
        server.close()
    finally:
        process.stop_server(port)
