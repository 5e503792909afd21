"""The models the lessons run on: the real default (SmolLM2-135M-Instruct, see ``smollm2``) and the
synthetic presets, llama-architecture GGUF files with seeded random weights built here.

Every model has a name and lives at ``models_dir() / "<name>.gguf"``; ``ensure_model(name)`` fetches,
derives or builds it when it is missing. The rest of this docstring is about the synthetic presets.

The lessons need a model that llama.cpp loads and runs at honest speed without
downloading gigabytes. A model's speed depends on its shapes and weight format,
not on what the weights say, so random weights give true timings (and
meaningless text). The tokenizer is real: a byte-level BPE with 4096 tokens
trained on ``data/corpus.txt`` (see ``scripts/train_tokenizer.py``), shipped in
``data/tokenizer/`` so that building never trains anything.

A build is deterministic: the same preset gives a byte-identical file on every
machine, operating system and supported Python/NumPy version. Nothing taken
from the clock, the host or the path enters the file, and the weights come from
a random stream whose definition NumPy keeps fixed (see ``_fill_random``).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bytesup.host.spent import MODELS, spent
from bytesup.models import smollm2
from bytesup.models.gguf import SYNTHETIC_NAME_PREFIX
from bytesup.paths import data_dir, models_dir
from bytesup.files import file_sha256  # noqa: F401 - part of this module's API (the CLI and tests use it)

__all__ = [
    "DEFAULT_MODEL",
    "SYNTHETIC_DEFAULT",
    "PRESETS",
    "Preset",
    "build_model",
    "default_model_path",
    "ensure_model",
    "file_sha256",
    "get_preset",
    "is_synthetic",
    "load_tokenizer",
    "model_names",
    "preset_rows",
    "tensor_shapes",
]

# Every synthetic shape is stored in each of these, in this order: the same random values four ways, so that models
# of one weight type and different shapes can be set against each other (lesson 8's decode-time model per type).
WEIGHT_TYPES = ("Q8_0", "F16", "Q4_1", "F32")
# The block formats: elements per block and bytes per block. Q8_0: one float16 scale and 32 int8 values; Q4_1: a
# float16 scale and a float16 minimum, then 32 values of 4 bits.
BLOCKS = {"Q8_0": (32, 34), "Q4_1": (32, 20)}
# The element bytes of the plain formats.
ELEMENT_BYTES = {"F16": 2, "F32": 4}
GGUF_ALIGNMENT = 32  # gguf's default data alignment
INIT_STD = 0.02  # standard deviation of the random weights
ROPE_FREQ_BASE = 10000.0
RMS_NORM_EPS = 1e-5

BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"

ProgressFn = Callable[[str, float], None]


# --------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Tokenizer:
    tokens: tuple[str, ...]  # index = token id
    merges: tuple[str, ...]  # "left right", by rank
    bos_id: int
    eos_id: int


@functools.lru_cache(maxsize=1)
def load_tokenizer() -> _Tokenizer:
    """The shipped byte-level BPE vocabulary (``data/tokenizer/vocab.json`` and ``merges.txt``)."""
    folder = data_dir() / "tokenizer"
    vocab: dict[str, int] = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(f"{folder / 'vocab.json'}: token ids must be 0..n-1 without gaps")
    merges = []
    for i, line in enumerate((folder / "merges.txt").read_text(encoding="utf-8").split("\n")):
        if not line or (i == 0 and line.startswith("#version")):
            continue
        if line.count(" ") != 1:
            raise ValueError(f"{folder / 'merges.txt'} line {i + 1}: expected 'left right', got {line!r}")
        merges.append(line)
    return _Tokenizer(tuple(tokens), tuple(merges), vocab[BOS_TOKEN], vocab[EOS_TOKEN])


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    """The shape and weight format of one default model.

    ``n_ctx`` is the training context length written into the file; a server
    may use any context up to it without warnings.
    """

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 4096
    weight_type: str = "Q8_0"  # "Q8_0", "F16", "Q4_1" or "F32"; norms are always F32
    seed: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if self.weight_type not in WEIGHT_TYPES:
            raise ValueError(f"{self.name}: weight_type must be one of {WEIGHT_TYPES}, not {self.weight_type!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"{self.name}: n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"{self.name}: n_head {self.n_head} is not a multiple of n_head_kv {self.n_head_kv}")
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(f"{self.name}: the head width must be even for RoPE")
        block = BLOCKS.get(self.weight_type, (1, 0))[0]
        if self.n_embd % block or self.n_ff % block:
            # A block format quantizes each row in blocks of 32, so every input width must divide by 32.
            raise ValueError(f"{self.name}: {self.weight_type} needs n_embd and n_ff to be multiples of {block}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_vocab(self) -> int:
        """Size of the shipped vocabulary (shared by every preset)."""
        return len(load_tokenizer().tokens)

    @property
    def n_params(self) -> int:
        """Exact number of weights in the file, norms included."""
        return sum(math.prod(shape) for _, shape in tensor_shapes(self))

    @property
    def tensor_bytes(self) -> int:
        """Exact bytes of tensor data, without alignment padding."""
        return sum(_tensor_nbytes(self, name, shape) for name, shape in tensor_shapes(self))

    @property
    def est_file_bytes(self) -> int:
        """Estimated file size: padded tensor data plus the metadata (vocabulary, merges, tensor index)."""
        data = sum(_pad(_tensor_nbytes(self, n, s)) for n, s in tensor_shapes(self))
        tok = load_tokenizer()
        meta = 1120  # magic, counts and the scalar keys
        meta += sum(8 + len(t.encode("utf-8")) + 4 for t in tok.tokens)  # token list + token types
        meta += sum(8 + len(m.encode("utf-8")) for m in tok.merges)
        meta += sum(8 + len(n) + 4 + 8 * len(s) + 4 + 8 for n, s in tensor_shapes(self))
        return data + _pad(meta)

    @property
    def file_type(self) -> int:
        """The ``general.file_type`` value (a ``gguf.LlamaFileType``)."""
        import gguf

        return int({"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
                    "F16": gguf.LlamaFileType.MOSTLY_F16, "F32": gguf.LlamaFileType.ALL_F32}[self.weight_type])


def _pad(n: int, align: int = GGUF_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight")


def _tensor_nbytes(preset: Preset, name: str, shape: tuple[int, ...]) -> int:
    n = math.prod(shape)
    if _is_norm(name):
        return 4 * n
    if preset.weight_type in BLOCKS:
        elements, nbytes = BLOCKS[preset.weight_type]
        return n // elements * nbytes
    return ELEMENT_BYTES[preset.weight_type] * n


def tensor_shapes(preset: Preset) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the model in file order, as (GGUF name, NumPy shape).

    NumPy shapes are (out_features, in_features); GGUF stores them reversed,
    so ``token_embd.weight`` (n_vocab, n_embd) is ``{n_embd, n_vocab}`` to llama.cpp.
    """
    d, ff, v = preset.n_embd, preset.n_ff, preset.n_vocab
    kv = preset.n_head_kv * preset.head_dim
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (v, d))]
    for i in range(preset.n_layer):
        b = f"blk.{i}."
        shapes += [
            (b + "attn_norm.weight", (d,)),
            (b + "attn_q.weight", (d, d)),
            (b + "attn_k.weight", (kv, d)),
            (b + "attn_v.weight", (kv, d)),
            (b + "attn_output.weight", (d, d)),
            (b + "ffn_norm.weight", (d,)),
            (b + "ffn_gate.weight", (ff, d)),
            (b + "ffn_up.weight", (ff, d)),
            (b + "ffn_down.weight", (d, ff)),
        ]
    shapes += [("output_norm.weight", (d,)), ("output.weight", (v, d))]
    return shapes


# Course model for comparison: width 4096, 32 blocks, 32 heads of 128, feed-forward 11008 (2.6875 x width).
# Ours keep the same recipe: feed-forward = 8/3 x width rounded up to a multiple of 32 (Q8_0 needs whole
# blocks), which gives 704, 1376, 2752 and 5504 (the last two are exactly 2.6875 x width).
_SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=4, n_ff=704,
                 description="a few MB; builds in about a second; for tests and quick checks"),
    "small": dict(n_layer=8, n_embd=512, n_head=8, n_head_kv=8, n_ff=1376,
                  description="tens of MB; fast on any laptop"),
    "medium": dict(n_layer=16, n_embd=1024, n_head=16, n_head_kv=16, n_ff=2752,
                   description="a few hundred MB; speeds start to look like a real model's"),
    "large": dict(n_layer=18, n_embd=2048, n_head=16, n_head_kv=16, n_ff=5504,
                  description="about a billion weights, heads of 128 like the course model"),
}
_SEED = 20240601


def _make_presets() -> dict[str, Preset]:
    presets: dict[str, Preset] = {}
    for size, shape in _SHAPES.items():
        for wtype in WEIGHT_TYPES:
            name = f"{size}-{wtype.lower()}"
            presets[name] = Preset(name=name, n_ctx=4096, weight_type=wtype, seed=_SEED, **shape)
    return presets


PRESETS: dict[str, Preset] = _make_presets()
DEFAULT_MODEL = smollm2.SOURCE  # smollm2-135m-q4_1: a trained model, fetched from the package index
SYNTHETIC_DEFAULT = "tiny-q8_0"  # offline and in fast tests: built here in about a second


def model_names() -> list[str]:
    """Every model `bytesup model build` knows: the real model's widths, then the synthetic presets."""
    return [*smollm2.REAL_MODELS, *PRESETS]


def is_synthetic(name: str) -> bool:
    """Whether a model name is one of the synthetic presets (random weights)."""
    return name in PRESETS



def get_preset(preset: str | Preset) -> Preset:
    """A preset by name (or the Preset itself); unknown names raise KeyError listing the known ones."""
    if isinstance(preset, Preset):
        return preset
    try:
        return PRESETS[preset]
    except KeyError:
        raise KeyError(f"unknown model preset {preset!r}; known: {', '.join(PRESETS)}") from None


def _known(name: str) -> str:
    if name in PRESETS or smollm2.is_real(name):
        return name
    raise KeyError(f"unknown model {name!r}; known: {', '.join(model_names())}")


def default_model_path(preset: str | Preset = DEFAULT_MODEL) -> Path:
    """Where a model lives: ``models_dir() / "<name>.gguf"``."""
    name = preset.name if isinstance(preset, Preset) else _known(preset)
    return models_dir() / f"{name}.gguf"


def preset_rows() -> list[dict]:
    """One row per model for a ``--list`` table (sizes in bytes, counts as ints): real widths first."""
    real = [
        {
            "name": m.name,
            "weight_type": m.weight_type,
            "n_layer": 30,
            "n_embd": 576,
            "n_head": 9,
            "n_ff": 1536,
            "n_params": None,
            "est_file_bytes": None,
            "tensor_mb": m.approx_tensor_mb,
            "default": m.name == DEFAULT_MODEL,
            "synthetic": False,
            "description": m.description,
        }
        for m in smollm2.REAL_MODELS.values()
    ]
    return real + [
        {
            "name": p.name,
            "weight_type": p.weight_type,
            "n_layer": p.n_layer,
            "n_embd": p.n_embd,
            "n_head": p.n_head,
            "n_ff": p.n_ff,
            "n_params": p.n_params,
            "est_file_bytes": p.est_file_bytes,
            "tensor_mb": p.tensor_bytes / 1e6,
            "default": p.name == DEFAULT_MODEL,
            "synthetic": True,
            "description": p.description,
        }
        for p in PRESETS.values()
    ]


# --------------------------------------------------------------------------- weights

# Irwin-Hall with four 16-bit uniforms: sum of 4 draws in 0..65535, centred. Its
# variance is 4 * (65536**2 - 1) / 12; the scale turns that into INIT_STD.
_IH_MEAN = 2 * 65535
_IH_SCALE = np.float32(INIT_STD / math.sqrt((65536**2 - 1) / 3))
_CHUNK = 1 << 22  # elements generated at a time


def _fill_random(bitgen: np.random.BitGenerator, out: np.ndarray) -> None:
    """Fill a float32 array with bell-shaped random values of standard deviation INIT_STD.

    Each value is the sum of four 16-bit pieces of one raw 64-bit PCG64 output,
    centred and scaled. Raw PCG64 output for a seed is fixed by the algorithm
    (NumPy keeps bit-generator streams stable), and the arithmetic here is exact
    integer work plus one correctly rounded float32 multiply, so every machine
    gets the same bits. Checked: NumPy 1.26 and 2.x, Python 3.11 and 3.13.
    ``Generator.standard_normal`` would be closer to a true normal, but its
    stream may change between NumPy versions and its rejection steps call the
    platform's ``exp``/``log``, whose last bit can differ between C libraries.
    """
    flat = out.reshape(-1)
    mask = np.uint64(0xFFFF)
    s16, s32, s48 = np.uint64(16), np.uint64(32), np.uint64(48)
    for start in range(0, flat.size, _CHUNK):
        n = min(_CHUNK, flat.size - start)
        r = np.asarray(bitgen.random_raw(n), dtype=np.uint64)
        total = (r & mask) + ((r >> s16) & mask) + ((r >> s32) & mask) + (r >> s48)
        centred = total.astype(np.int64) - _IH_MEAN  # |x| <= 131070: exact in float32
        flat[start : start + n] = centred.astype(np.float32) * _IH_SCALE


def _tensor_data(preset: Preset, name: str, shape: tuple[int, ...], bitgen: np.random.BitGenerator) -> np.ndarray:
    """The stored bytes of one tensor, as the array GGUFWriter.write_tensor_data wants."""
    import gguf

    if _is_norm(name):
        return np.ones(shape, dtype=np.float32)
    weights = np.empty(shape, dtype=np.float32)
    _fill_random(bitgen, weights)
    if preset.weight_type == "F16":
        return weights.astype(np.float16)
    if preset.weight_type == "F32":
        return weights
    return gguf.quants.quantize(weights, _ggml_type(preset, name))


def _ggml_type(preset: Preset, name: str):
    import gguf

    if _is_norm(name):
        return gguf.GGMLQuantizationType.F32
    return gguf.GGMLQuantizationType[preset.weight_type]


# --------------------------------------------------------------------------- building


def _add_metadata(writer, preset: Preset) -> None:
    import gguf

    tok = load_tokenizer()
    control = {tok.bos_id, tok.eos_id}
    token_types = [
        int(gguf.TokenType.CONTROL) if i in control else int(gguf.TokenType.NORMAL) for i in range(len(tok.tokens))
    ]

    writer.add_name(f"{SYNTHETIC_NAME_PREFIX}{preset.name}")
    writer.add_description("bytesup default model: random weights, real byte-level BPE tokenizer")
    writer.add_context_length(preset.n_ctx)
    writer.add_embedding_length(preset.n_embd)
    writer.add_block_count(preset.n_layer)
    writer.add_feed_forward_length(preset.n_ff)
    writer.add_head_count(preset.n_head)
    writer.add_head_count_kv(preset.n_head_kv)
    writer.add_rope_dimension_count(preset.head_dim)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_file_type(preset.file_type)
    writer.add_vocab_size(len(tok.tokens))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(list(tok.tokens))
    writer.add_token_types(token_types)
    writer.add_token_merges(list(tok.merges))
    writer.add_bos_token_id(tok.bos_id)
    writer.add_eos_token_id(tok.eos_id)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)


def build_model(
    preset: str | Preset = SYNTHETIC_DEFAULT,
    out: Path | None = None,
    progress: ProgressFn | None = None,
) -> Path:
    """Write the preset's GGUF file (replacing any file there) and return its path.

    The file is written under a temporary name in the same folder and renamed at
    the end, so an interrupted build never leaves a half-written model under the
    final name. ``progress(message, fraction)`` is called as tensors are written,
    with fraction going from 0.0 to 1.0 by bytes written.
    """
    import gguf

    p = get_preset(preset)
    path = Path(out) if out is not None else default_model_path(p)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")

    shapes = tensor_shapes(p)
    total = sum(_tensor_nbytes(p, n, s) for n, s in shapes)
    report = progress or (lambda message, fraction: None)

    writer = gguf.GGUFWriter(tmp, "llama")
    try:
        report(f"{p.name}: metadata", 0.0)
        _add_metadata(writer, p)
        for name, shape in shapes:
            # The shape is in elements; raw_dtype states the stored type, so nothing is converted here.
            writer.add_tensor_info(
                name, shape, np.dtype(np.float32), _tensor_nbytes(p, name, shape), raw_dtype=_ggml_type(p, name)
            )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()

        # One stream for the whole file; tensors are drawn from it in file order, one at a time.
        bitgen = np.random.default_rng(p.seed).bit_generator
        done = 0
        for name, shape in shapes:
            data = _tensor_data(p, name, shape, bitgen)
            writer.write_tensor_data(data)
            done += data.nbytes
            del data
            report(f"{p.name}: {name}", done / total)
        writer.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    report(f"{p.name}: done", 1.0)
    return path


def build(name: str = DEFAULT_MODEL, out: Path | None = None, progress: ProgressFn | None = None) -> Path:
    """Write any known model (replacing a file there): fetch or derive a real width, or build a preset."""
    path = Path(out) if out is not None else default_model_path(name)
    if smollm2.is_real(_known(name)):
        source = default_model_path(smollm2.SOURCE)
        return smollm2.build(name, path, source if smollm2.source_is_valid(source) else None, progress)
    return build_model(name, path, progress)


def ensure_model(preset: str | Preset = DEFAULT_MODEL, out: Path | None = None,
                 progress: ProgressFn | None = None) -> Path:
    """The model's file, fetched, derived or built first if it does not exist yet."""
    if isinstance(preset, Preset):
        path = Path(out) if out is not None else default_model_path(preset)
        if path.is_file():
            return path
        with spent(MODELS):  # a lesson's time split: making models
            return build_model(preset, path, progress)
    path = Path(out) if out is not None else default_model_path(preset)
    if path.is_file():
        return path
    with spent(MODELS):
        return build(preset, path, progress)

