"""`bytesup model derive`: other widths of a llama GGUF, tensor by tensor, within a stated memory bound, the same
bytes every time, hashed, atomic, refusing what it cannot do in one paragraph."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.errors import BytesupError
from bytesup.files import file_sha256
from bytesup.llama import process
from bytesup.models import derive
from bytesup.models import smollm2
from bytesup.models.catalog import SYNTHETIC_DEFAULT, Preset, build_model, ensure_model
from conftest import gguf_parsed_once

T = gguf.GGMLQuantizationType


@pytest.fixture(scope="module", autouse=True)
def _each_file_parsed_once():
    """Each GGUF file these tests and ``derive`` read is parsed once for the module (conftest.gguf_parsed_once): the
    source, tiny-q8_0, is read by nearly every test."""
    with gguf_parsed_once():
        yield


@pytest.fixture(scope="module")
def tiny() -> Path:
    return ensure_model(SYNTHETIC_DEFAULT)  # Q8_0 matrices, F32 norms


def tensors(path: Path) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def handmade(path: Path, arch: str = "llama") -> Path:
    """A GGUF with one matrix whose rows (48) fill no whole block of 32, a 32-wide matrix and a norm."""
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_tensor("odd.weight", rng.standard_normal((4, 48)).astype(np.float32))
    w.add_tensor("even.weight", rng.standard_normal((3, 64)).astype(np.float32))
    w.add_tensor("some_norm.weight", np.ones(48, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# --------------------------------------------------------------------------- widths and names


def test_widths_are_parsed_in_order_once_and_unknown_ones_are_named():
    assert [w.name for w in derive.parse_widths(" F16, q8_0,,f16,q4_0")] == ["f16", "q8_0", "q4_0"]
    for bad, named in (("f16,q3_k", "q3_k"), ("", "no width"), (" , ", "no width")):
        with pytest.raises(BytesupError) as exc:
            derive.parse_widths(bad)
        assert named in str(exc.value) and "q4_0" in str(exc.value) and "\n" not in str(exc.value)


def test_every_width_is_a_type_gguf_encodes_with_its_file_type_and_size():
    for w in derive.WIDTHS.values():
        block, size = gguf.GGML_QUANT_SIZES[w.ggml_type]
        encoded = gguf.quants.quantize(np.zeros((2, 64), dtype=np.float32), w.ggml_type)
        assert encoded.nbytes == 2 * 64 // block * size
        assert w.bytes_per_weight == size / block
    # Hand arithmetic: Q8_0 is a float16 scale and 32 int8 values a block, Q4_0 the scale and 32 nibbles.
    assert derive.WIDTHS["q8_0"].bytes_per_weight == 34 / 32 and derive.WIDTHS["q4_0"].bytes_per_weight == 18 / 32
    assert [derive.WIDTHS[n].file_type for n in ("f32", "f16", "q4_0", "q4_1", "q8_0", "q5_0", "q5_1", "bf16")] == \
        [0, 1, 2, 3, 7, 8, 9, 32]
    for model in smollm2.REAL_MODELS.values():  # SmolLM2's widths say the same type
        assert derive.WIDTHS[model.weight_type.lower()].file_type == model.file_type


def test_outputs_are_named_after_the_source_without_its_width():
    q4, f16 = derive.WIDTHS["q4_0"], derive.WIDTHS["f16"]
    assert derive.output_path(Path("m/deepseek-coder-6.7b-instruct.Q8_0.gguf"), f16) == Path("m/deepseek-coder-6.7b-instruct-f16.gguf")
    assert derive.output_path(Path("m/smollm2-135m-q4_1.gguf"), f16) == Path("m/smollm2-135m-f16.gguf")  # the catalog's name
    assert derive.output_path(Path("a/Llama.Q4_K_M.gguf"), q4, Path("b")) == Path("b/Llama-q4_0.gguf")
    assert derive.output_path(Path("plain.gguf"), q4) == Path("plain-q4_0.gguf")
    assert derive.record_path(Path("b/x-q4_0.gguf")) == Path("b/x-q4_0.gguf.json")


# --------------------------------------------------------------------------- what the bytes are


def test_each_tensor_is_the_whole_tensor_dequantized_and_encoded_again(tiny, tmp_path):
    source = derive.open_source(tiny)
    src = tensors(tiny)
    for name in ("q4_0", "f16", "q8_0"):  # f32: by hand, below
        width = derive.WIDTHS[name]
        # 1,000 values a slice: three rows of 256 at a time, so every matrix is cut into many slices.
        made = derive.write_width(source, width, tmp_path / f"{name}.gguf", chunk_values=1000)
        out = tensors(made.path)
        assert list(out) == list(src)
        for t in src.values():
            o = out[t.name]
            assert [int(x) for x in o.shape] == [int(x) for x in t.shape]
            if len(t.shape) == 1 or t.tensor_type == width.ggml_type:
                want = t.tensor_type  # norms keep F32; Q8_0 into q8_0 is copied
            else:
                want = width.ggml_type
            assert o.tensor_type == want, (name, t.name)
            whole = np.asarray(t.data)  # the naive reference: the whole tensor at once, straight from gguf
            if want == t.tensor_type:
                expected = whole
            else:
                expected = gguf.quants.quantize(gguf.quants.dequantize(whole, t.tensor_type), want)
            assert np.asarray(o.data).tobytes() == np.ascontiguousarray(expected).tobytes(), (name, t.name)
        assert made.tensor_bytes == sum(int(o.n_bytes) for o in out.values())
        reader = gguf.GGUFReader(made.path)
        assert reader.fields["general.file_type"].contents() == width.file_type
        kept = gguf.GGUFReader(tiny).fields
        for key in ("general.name", "llama.block_count", "tokenizer.ggml.tokens"):
            assert reader.fields[key].contents() == kept[key].contents()


def test_the_f32_width_of_a_q8_0_block_is_its_scale_times_its_integers(tiny, tmp_path):
    made = derive.write_width(derive.open_source(tiny), derive.WIDTHS["f32"], tmp_path / "f32.gguf")
    name = "blk.0.attn_q.weight"
    raw = np.asarray(tensors(tiny)[name].data).reshape(-1, 34)  # a float16 scale, then 32 int8 values
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
    got = np.asarray(tensors(made.path)[name].data).reshape(-1)
    assert np.array_equal(got, (d * q).reshape(-1))


def test_rows_that_fill_no_block_stay_f16_and_the_record_names_them(tmp_path):
    src = handmade(tmp_path / "hand.gguf")
    made = derive.derive(src, [derive.WIDTHS["q4_0"]], tmp_path / "out")[0]
    out = tensors(made.path)
    assert (out["odd.weight"].tensor_type, out["even.weight"].tensor_type, out["some_norm.weight"].tensor_type) == \
        (T.F16, T.Q4_0, T.F32)
    assert np.array_equal(np.asarray(out["odd.weight"].data), np.asarray(tensors(src)["odd.weight"].data).astype(np.float16))
    record = json.loads(derive.record_path(made.path).read_text())
    assert record["fallback_f16"] == ["odd.weight"] and record["tensor_types"] == {"F16": 1, "F32": 1, "Q4_0": 1}


def test_same_input_same_bytes_whatever_the_slice_and_the_record_holds_the_hash(tiny, tmp_path):
    widths = derive.parse_widths("q4_0,f16")
    a = derive.derive(tiny, widths, tmp_path / "a")
    b = derive.derive(tiny, widths, tmp_path / "b", chunk_values=300)  # one row of 256 a slice
    for x, y in zip(a, b, strict=True):
        assert x.sha256 == y.sha256 == file_sha256(x.path) == file_sha256(y.path)
        record = json.loads(derive.record_path(x.path).read_text())
        assert record["sha256"] == x.sha256 and record["bytes"] == x.path.stat().st_size == x.bytes
        assert record["source"] == {"file": tiny.name, "bytes": tiny.stat().st_size, "sha256": file_sha256(tiny)}
        assert record["width"] == x.width.name and record["file_type"] == x.width.file_type


# --------------------------------------------------------------------------- memory


# Resident memory from /proc, not getrusage: a child's ru_maxrss starts at its parent's peak (the pytest process's
# hundreds of MB) and survives exec, whereas VmHWM belongs to the new program; clear_refs 5 restarts it here.
MEASURE = """
import sys
from pathlib import Path
from bytesup.models import derive

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

source = derive.open_source(Path(sys.argv[1]))
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
before = status("VmRSS")
made = derive.write_width(source, derive.WIDTHS[sys.argv[2]], Path(sys.argv[3]), chunk_values=int(sys.argv[4]))
print(status("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident memory from /proc (Linux)")
def test_memory_stays_within_the_bound_whatever_the_tensor(tmp_path):
    # One block of width 1024 and a 4096-token vocabulary: the embedding and the output are 4,194,304 values
    # each, 16 MiB as float32, far above the bound at 262,144 values a slice (8 MiB).
    preset = Preset(name="wide-q8_0", n_layer=1, n_embd=1024, n_head=8, n_head_kv=8, n_ff=1024, seed=3)
    source = build_model(preset, tmp_path / "wide-q8_0.gguf")
    biggest = max(int(t.n_elements) for t in gguf.GGUFReader(source).tensors)
    assert biggest * 4 == 16 << 20

    def growth(chunk: int) -> int:  # peak resident bytes above those held before deriving, in a fresh process
        done = subprocess.run([sys.executable, "-c", MEASURE, str(source), "f16", str(tmp_path / f"{chunk}.gguf"), str(chunk)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    chunk = 1 << 18
    assert derive.memory_bound(chunk) == 16 * chunk + (4 << 20) < biggest * 4
    assert growth(chunk) <= derive.memory_bound(chunk)
    # The measurement can fail: one slice holding a whole tensor goes past that bound.
    assert growth(biggest) > derive.memory_bound(chunk)


# --------------------------------------------------------------------------- refusals


def test_a_missing_corrupt_or_cut_source_is_one_paragraph(tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[: tiny.stat().st_size // 2])
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    for path, said in ((tmp_path / "nope.gguf", "does not exist"), (cut, "truncated"), (junk, "corrupt"),
                       (tmp_path, "folder")):
        with pytest.raises(BytesupError) as exc:
            derive.derive(path, [derive.WIDTHS["f16"]], tmp_path / "out")
        assert said in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_another_architecture_is_refused(tmp_path):
    src = handmade(tmp_path / "bert.gguf", arch="bert")
    with pytest.raises(BytesupError) as exc:
        derive.derive(src, [derive.WIDTHS["f16"]], tmp_path / "out")
    assert "'bert'" in str(exc.value) and "llama" in str(exc.value)
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_kept_unless_forced_and_the_source_never_replaced(tiny, tmp_path):
    q4 = [derive.WIDTHS["q4_0"]]
    made = derive.derive(tiny, q4, tmp_path)[0]
    made.path.write_bytes(b"mine")
    with pytest.raises(BytesupError) as exc:
        derive.derive(tiny, q4, tmp_path)
    assert "--force" in str(exc.value) and made.path.read_bytes() == b"mine"
    assert derive.derive(tiny, q4, tmp_path, force=True)[0].sha256 == file_sha256(made.path) == made.sha256
    with pytest.raises(BytesupError) as exc:  # tiny-q8_0 at q8_0 is tiny-q8_0.gguf itself
        derive.derive(tiny, [derive.WIDTHS["q8_0"]], None, force=True)
    assert "replace the model it is derived from" in str(exc.value)


def test_a_full_disk_leaves_no_file_under_any_name(tiny, tmp_path, monkeypatch):
    calls = []

    def full(fh, piece):
        calls.append(1)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        fh.write(piece.data)

    monkeypatch.setattr(derive, "_write", full)
    with pytest.raises(BytesupError) as exc:
        derive.derive(tiny, [derive.WIDTHS["f16"]], tmp_path / "out")
    assert "full" in str(exc.value) and "--out" in str(exc.value)
    assert not list((tmp_path / "out").iterdir())


# --------------------------------------------------------------------------- the command


def test_the_command_prints_the_hash_it_records_and_fails_on_bad_input(tiny, tmp_path):
    runner = CliRunner()
    done = runner.invoke(app, ["model", "derive", str(tiny), "--widths", "q4_1", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    made = tmp_path / "tiny-q4_1.gguf"
    sha = file_sha256(made)
    assert sha in done.output.replace("\n", "") and json.loads(derive.record_path(made).read_text())["sha256"] == sha
    assert "--sizes" in done.output and "08_capstone_decode_memory_bound" in done.output
    by_name = runner.invoke(app, ["model", "derive", SYNTHETIC_DEFAULT, "--widths", "q4_1", "--out", str(tmp_path)])
    assert by_name.exit_code == 1 and "--force" in by_name.output  # the same source, found by its name
    for args in (["--widths", "q9"], ["--widths", "f16", "--out", str(tmp_path / "x")]):
        target = str(tmp_path / "absent.gguf") if args[1] == "f16" else str(tiny)
        bad = runner.invoke(app, ["model", "derive", target, *args])
        assert bad.exit_code == 1 and "error:" in bad.output
    assert not (tmp_path / "x").exists()


@pytest.mark.integration
def test_llama_server_loads_a_derived_width_and_reports_its_size(tiny, tmp_path):
    import httpx

    made = derive.derive(tiny, [derive.WIDTHS["q4_0"]], tmp_path)[0]
    port = process.free_port()
    started = process.start_server(made.path, ["--port", str(port), "-t", "2", "-c", "256"])
    try:
        meta = httpx.get(f"{started.url}/v1/models", timeout=30).json()["data"][0]["meta"]
        done = httpx.post(f"{started.url}/completion", json={"prompt": "The capital of France is", "n_predict": 4,
                                                              "temperature": 0, "seed": 42, "cache_prompt": False},
                          timeout=60).json()
    finally:
        process.stop_server(port)
    assert meta["size"] == made.tensor_bytes  # the bytes the server holds are the ones planned
    assert done["timings"]["predicted_n"] == 4
