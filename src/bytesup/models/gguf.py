"""Read what a GGUF model file says about itself: hyperparameters, tensors, bytes per type.

Only the header and metadata are parsed; tensor data is never loaded, so a 7 GB model is
described in milliseconds. Everything returned is plain JSON data (dict, list, str, int, float,
bool, None) because lesson results are recorded to JSON and replayed.

Why not ``gguf.GGUFReader`` for the header: it builds two numpy views for every string of every
array, so a Llama-3 style vocabulary (128k tokens plus 280k merges) took about 10 s on the course
host. The walk below skips string arrays in about 50 ms; the format constants, tensor type sizes
and dequantizers still come from the ``gguf`` package, and the tests check this parser against
``GGUFReader`` field by field.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGMLQuantizationType,
    GGUFValueType,
    LlamaFileType,
)
from gguf.quants import dequantize

from bytesup.errors import BytesupError

__all__ = ["GGUFError", "TensorFile", "check_gguf", "read_model_info", "read_vocabulary", "embedding_row"]

_HINT = "Pass the path of a .gguf model, or build the default one with `bytesup model build`."
_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)  # version 1 used 32-bit counts and is long gone
_MAX_DIMS = 4  # GGML_MAX_DIMS in ggml.h
_MAX_ARRAY_DEPTH = 8  # arrays of arrays: llama.cpp writes none; deeper ones only mean a damaged or hostile file

# struct codes of the fixed-size metadata value types.
_SCALAR_FMT = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
# Numeric arrays longer than this are summarised by their length only, so that a per-token
# score or type array does not balloon the recorded JSON.
_KEEP_ARRAY_VALUES = 64


class GGUFError(BytesupError):
    """A model path that is not a readable, complete GGUF file (message: what is wrong, what to do)."""


@dataclass
class _Array:
    """A metadata array: its item type, its length, and its values when short and numeric."""

    item_type: str
    length: int
    values: list | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"array_of": self.item_type, "length": self.length}
        if self.values is not None:
            out["values"] = self.values
        return out


@dataclass
class _Tensor:
    name: str
    shape: list[int]  # ne order, as llama.cpp prints it: ne[0] is the contiguous row length
    qtype: GGMLQuantizationType
    n_elements: int
    n_bytes: int
    offset: int  # absolute byte offset of the data in the file


@dataclass
class _Header:
    path: Path
    file_size: int
    version: int
    byte_order: str  # "<" or ">"
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[_Tensor] = field(default_factory=list)
    data_offset: int = 0


class _Cut(Exception):
    """Internal: the header asks for bytes past the end of the file."""


class _Walker:
    """Reads GGUF header values sequentially from a memory map, checking every bound."""

    def __init__(self, buf: mmap.mmap, order: str):
        self.buf = buf
        self.size = len(buf)
        self.order = order
        self.off = 0
        self._u64 = struct.Struct(order + "Q")

    def scalar(self, code: str) -> Any:
        st = struct.calcsize(code)
        if self.off + st > self.size:
            raise _Cut()
        (value,) = struct.unpack_from(self.order + code, self.buf, self.off)
        self.off += st
        return value

    def string(self) -> str:
        n = self.scalar("Q")
        if self.off + n > self.size:
            raise _Cut()
        raw = self.buf[self.off : self.off + n]
        self.off += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        # The hot loop of the whole module: a vocabulary is hundreds of thousands of strings.
        off, size, unpack = self.off, self.size, self._u64.unpack_from
        for _ in range(count):
            if off + 8 > size:
                raise _Cut()
            off += 8 + unpack(self.buf, off)[0]
        if off > size:
            raise _Cut()
        self.off = off

    def value(self, vtype: int, depth: int = 0) -> Any:
        vt = _value_type(vtype)
        if vt == GGUFValueType.STRING:
            return self.string()
        if vt == GGUFValueType.ARRAY:
            item = _value_type(self.scalar("I"))
            count = self.scalar("Q")
            if item == GGUFValueType.STRING:
                self.skip_strings(count)
                return _Array("STRING", count)
            if item == GGUFValueType.ARRAY:
                # Nested arrays are legal but unused by llama.cpp; walk them to stay in step, to a sane depth.
                if depth >= _MAX_ARRAY_DEPTH:
                    raise ValueError(f"its metadata nests arrays more than {_MAX_ARRAY_DEPTH} deep")
                for _ in range(count):
                    self.value(GGUFValueType.ARRAY, depth + 1)
                return _Array("ARRAY", count)
            code = _SCALAR_FMT[item]
            nbytes = struct.calcsize(code) * count
            if self.off + nbytes > self.size:
                raise _Cut()
            values = None
            if count <= _KEEP_ARRAY_VALUES:
                values = list(struct.unpack_from(f"{self.order}{count}{code}", self.buf, self.off))
            self.off += nbytes
            return _Array(item.name, count, values)
        return self.scalar(_SCALAR_FMT[vt])


def _value_type(raw: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise ValueError(f"an unknown metadata value type {raw}") from None


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether `path` is a file that starts with GGUF's magic: the only read made of a file bytesup was not
    told to open (a path a server reports), and nothing of it is ever shown."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == _MAGIC
    except OSError:
        return False


def _parse_header(path: str | os.PathLike) -> _Header:
    """Parse header, metadata and tensor table; raise GGUFError for anything unusable."""
    p = Path(path).expanduser()
    if not p.exists():
        raise GGUFError(f"The model file {p} does not exist. {_HINT}")
    if p.is_dir():
        raise GGUFError(f"The model path {p} is a folder, not a file. {_HINT}")
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise GGUFError(f"The model file {p} cannot be opened ({exc.strerror or exc}). Check its permissions. {_HINT}") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        # magic (4) + version (4) + tensor count (8) + metadata count (8)
        if size < 24:
            what = "is empty" if size == 0 else f"is only {size} bytes long, shorter than any GGUF header"
            raise GGUFError(f"The model file {p} {what}. It was probably cut short while downloading or building. {_HINT}")
        head = fh.read(8)
        if head[:4] != _MAGIC:
            raise GGUFError(f"{p} is not a GGUF file (it does not start with the four bytes GGUF). {_HINT}")
        # A version whose low 16 bits are zero was written on a machine of the other byte order.
        (version,) = struct.unpack("<I", head[4:8])
        order = "<"
        if version & 0xFFFF == 0:
            (version,) = struct.unpack(">I", head[4:8])
            order = ">"
        if version not in _SUPPORTED_VERSIONS:
            # A small number is a version some writer used; anything else is four bytes of another file, not shown.
            which = f"GGUF version {version}" if version < 256 else "no GGUF version any writer uses"
            raise GGUFError(
                f"{p} is {which}, which this reader does not handle (it reads versions 2 and 3). "
                "Convert the model again with a current llama.cpp, or pass a newer model."
            )
        try:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise GGUFError(f"The model file {p} cannot be memory-mapped ({exc}). {_HINT}") from None
    header = _Header(path=p, file_size=size, version=version, byte_order=order)
    try:
        _walk(buf, header)
    except _Cut:
        raise GGUFError(
            f"The model file {p} is truncated: its header runs past the end of the file ({size} bytes). "
            f"The download or build was probably interrupted; delete it and fetch or build it again. {_HINT}"
        ) from None
    except (ValueError, KeyError, UnicodeDecodeError, OverflowError, RecursionError) as exc:
        raise GGUFError(f"The GGUF header of {p} is corrupt ({exc}). Fetch or build the model again. {_HINT}") from None
    finally:
        buf.close()
    if not header.tensors:
        raise GGUFError(f"The GGUF file {p} holds no tensors, so it is no model to run (a vocabulary-only file?). {_HINT}")
    empty = next((t for t in header.tensors if t.n_elements == 0), None)
    if empty is not None:
        raise GGUFError(f"The GGUF file {p} is corrupt: its tensor {empty.name!r} has shape {list(empty.shape)}, with no "
                        f"elements. Fetch or build the model again. {_HINT}")
    needed = max((t.offset + t.n_bytes for t in header.tensors), default=0)
    if needed > size:
        raise GGUFError(
            f"The model file {p} is truncated: its tensors need {needed} bytes but the file has only {size} "
            f"({needed - size} missing). The download or build was probably interrupted; delete it and fetch "
            f"or build it again. {_HINT}"
        )
    return header


def _walk(buf: mmap.mmap, header: _Header) -> None:
    w = _Walker(buf, header.byte_order)
    w.off = 8
    n_tensors = w.scalar("Q")
    n_kv = w.scalar("Q")
    # Each entry needs at least a dozen bytes, so absurd counts mean a corrupt header.
    if n_kv * 12 > w.size or n_tensors * 24 > w.size:
        raise ValueError(f"it claims {n_kv} metadata entries and {n_tensors} tensors")
    for _ in range(n_kv):
        key = w.string()
        header.metadata[key] = w.value(w.scalar("I"))

    infos = []
    for _ in range(n_tensors):
        name = w.string()
        n_dims = w.scalar("I")
        if n_dims > _MAX_DIMS:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
        shape = [w.scalar("Q") for _ in range(n_dims)]
        raw_type = w.scalar("I")
        rel = w.scalar("Q")
        infos.append((name, shape, raw_type, rel))

    align = header.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise ValueError(f"general.alignment is {align!r}, not a power of two")
    header.data_offset = -(-w.off // align) * align  # tensor data starts at the next aligned byte

    for name, shape, raw_type, rel in infos:
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ValueError(
                f"tensor {name!r} has type id {raw_type}, unknown to gguf (the Python package); upgrade it"
            ) from None
        block, type_size = GGML_QUANT_SIZES[qtype]
        n_el = math.prod(shape)  # exact Python ints; 1 for a 0-D tensor
        if shape and shape[0] % block:
            raise ValueError(f"tensor {name!r} rows of {shape[0]} do not fill whole {qtype.name} blocks of {block}")
        header.tensors.append(_Tensor(name, shape, qtype, n_el, n_el // block * type_size, header.data_offset + rel))


def check_gguf(path: str | os.PathLike) -> None:
    """Raise GGUFError unless `path` is a readable GGUF whose tensor data is all there (header-only read)."""
    _parse_header(path)


def _group(name: str) -> str:
    """The lesson's parameter group of a tensor, from the llama.cpp tensor name."""
    parts = name.split(".")
    comp = parts[-2] if len(parts) >= 2 and parts[-1] in ("weight", "bias") else parts[-1]
    if comp == "norm" or comp.endswith("_norm"):
        return "norms"
    if comp == "token_embd":
        return "embedding"
    if comp.startswith("attn_"):
        return "attention"
    if comp.startswith("ffn_"):  # gate/up/down, plus the MoE router and expert variants
        return "feed_forward"
    if name in ("output.weight", "output.bias"):
        return "output"
    return "other"


def _num(value: Any) -> Any:
    """Metadata value for the JSON result: scalars as they are, arrays as their values or a summary."""
    if isinstance(value, _Array):
        return value.values if value.values is not None else value.to_json()
    return value


def read_model_info(path: str | os.PathLike) -> dict:
    """Describe a GGUF model: hyperparameters, tensor table and parameter/byte totals, as JSON data."""
    h = _parse_header(path)
    md = h.metadata
    arch = md.get("general.architecture")

    def key(suffix: str) -> Any:
        return _num(md.get(f"{arch}.{suffix}")) if arch else None

    n_embd = key("embedding_length")
    n_head = key("attention.head_count")
    n_head_kv = key("attention.head_count_kv")
    if n_head_kv is None:
        n_head_kv = n_head
    head_dim = key("attention.key_length")
    if head_dim is None and isinstance(n_embd, int) and isinstance(n_head, int) and n_head > 0:
        head_dim = n_embd // n_head if n_embd % n_head == 0 else n_embd / n_head

    tokens = md.get("tokenizer.ggml.tokens")
    embd = next((t for t in h.tensors if t.name == "token_embd.weight"), None)
    n_vocab: int | None
    if isinstance(tokens, _Array):
        n_vocab = tokens.length
    elif key("vocab_size") is not None:
        n_vocab = key("vocab_size")
    else:  # a model without a tokenizer still has one embedding row per token
        n_vocab = embd.shape[1] if embd is not None and len(embd.shape) > 1 else None

    rope_base = key("rope.freq_base")
    rope_dims = key("rope.dimension_count")

    ftype = md.get("general.file_type")
    file_type = None
    if isinstance(ftype, int):
        try:
            file_type = {"name": LlamaFileType(ftype).name, "id": ftype}
        except ValueError:
            file_type = {"name": f"UNKNOWN_{ftype}", "id": ftype}

    tensors: list[dict[str, Any]] = []
    bytes_by_type: dict[str, int] = {}
    params_by_type: dict[str, int] = {}
    group_names = ("embedding", "attention", "feed_forward", "norms", "output", "other")
    groups = dict.fromkeys(group_names, 0)
    group_bytes = dict.fromkeys(group_names, 0)
    group_tensors = dict.fromkeys(group_names, 0)
    for t in h.tensors:
        tname = t.qtype.name
        group = _group(t.name)
        tensors.append(
            {"name": t.name, "shape": list(t.shape), "type": tname, "n_elements": t.n_elements, "n_bytes": t.n_bytes,
             "offset": t.offset, "group": group}
        )
        bytes_by_type[tname] = bytes_by_type.get(tname, 0) + t.n_bytes
        params_by_type[tname] = params_by_type.get(tname, 0) + t.n_elements
        groups[group] += t.n_elements
        group_bytes[group] += t.n_bytes
        group_tensors[group] += 1

    return {
        "path": str(h.path.resolve()),
        "file_size_bytes": h.file_size,
        "gguf_version": h.version,
        "data_offset": h.data_offset,
        "architecture": arch,
        "name": md.get("general.name"),
        "file_type": file_type,
        "hyperparameters": {
            "n_layer": key("block_count"),
            "n_embd": n_embd,
            "n_head": n_head,
            "n_head_kv": n_head_kv,
            "head_dim": head_dim,
            "n_ff": key("feed_forward_length"),
            "n_vocab": n_vocab,
            "n_ctx_train": key("context_length"),
            "rope_freq_base": float(rope_base) if rope_base is not None else 10000.0,
            "rope_freq_base_default": rope_base is None,
            # llama.cpp rotates the whole head when the key is absent.
            "rope_dimension_count": rope_dims if rope_dims is not None else head_dim,
            "rope_dimension_count_default": rope_dims is None,
        },
        "tensors": tensors,
        "n_tensors": len(tensors),
        "n_params": sum(t.n_elements for t in h.tensors),
        "tensor_bytes": sum(t.n_bytes for t in h.tensors),
        "bytes_by_type": dict(sorted(bytes_by_type.items(), key=lambda kv: -kv[1])),
        "params_by_type": dict(sorted(params_by_type.items(), key=lambda kv: -kv[1])),
        "params_by_group": groups,
        "bytes_by_group": group_bytes,
        "tensors_by_group": group_tensors,
        "metadata": {k: (v.to_json() if isinstance(v, _Array) else v) for k, v in md.items()},
        # The output matrix is the token embedding itself when the file has no output.weight.
        "tied_output": embd is not None and not any(t.name == "output.weight" for t in h.tensors),
        "synthetic": is_synthetic_metadata(md),
    }


SYNTHETIC_NAME_PREFIX = "bytesup-"


def is_synthetic_metadata(md: dict) -> bool:
    """Whether GGUF metadata marks one of bytesup's random-weight presets.

    Decided from the file, never from its name on disk: the preset builder writes ``general.name``
    ``bytesup-<preset>`` and a ``general.description`` that says the weights are random.
    """
    name = str(md.get("general.name") or "")
    description = str(md.get("general.description") or "")
    return name.startswith(SYNTHETIC_NAME_PREFIX) and "random weights" in description


def embedding_row(path: str | os.PathLike, token_id: int) -> list[float]:
    """The dequantized row of token_embd.weight for `token_id`, reading only that row's bytes."""
    h = _parse_header(path)
    embd = next((t for t in h.tensors if t.name == "token_embd.weight"), None)
    if embd is None or len(embd.shape) != 2:
        raise GGUFError(f"The model file {h.path} has no 2-D token_embd.weight tensor, so it has no embedding rows to read. {_HINT}")
    n_embd, n_vocab = embd.shape
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)) or not 0 <= token_id < n_vocab:
        raise GGUFError(
            f"Token id {token_id!r} is out of range for {h.path}: its embedding has {n_vocab} rows, "
            f"so ids run from 0 to {n_vocab - 1}. Tokenize the text with this model's tokenizer to get valid ids."
        )
    if h.byte_order != "<" and embd.qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        raise GGUFError(f"{h.path} is a big-endian GGUF with {embd.qtype.name} embeddings, which this reader cannot decode. "
                        "Use a little-endian model.")
    block, type_size = GGML_QUANT_SIZES[embd.qtype]
    row_bytes = n_embd // block * type_size
    with open(h.path, "rb") as fh:
        fh.seek(embd.offset + int(token_id) * row_bytes)
        raw = fh.read(row_bytes)
    if len(raw) != row_bytes:  # the file shrank after the header check
        raise GGUFError(f"The model file {h.path} ended inside the embedding row of token {token_id}; it is truncated. {_HINT}")
    data = np.frombuffer(raw, dtype=np.uint8)
    if h.byte_order != "<":
        item = np.dtype(np.float32 if embd.qtype == GGMLQuantizationType.F32 else np.float16)
        data = data.view(item.newbyteorder(">")).astype(item).view(np.uint8)
    try:
        row = dequantize(data, embd.qtype)
    except NotImplementedError:
        raise GGUFError(
            f"The embeddings of {h.path} are stored as {embd.qtype.name}, which gguf {_gguf_version()} cannot dequantize. "
            "Use a model quantized to F16, Q8_0 or a K-quant."
        ) from None
    return np.asarray(row, dtype=np.float32).reshape(-1).tolist()


def read_vocabulary(path: str | os.PathLike) -> tuple[str | None, list[str]]:
    """The tokenizer's kind (`tokenizer.ggml.model`: "gpt2", "llama", …) and every token's piece as the file spells it."""
    h = _parse_header(path)
    with open(h.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        w = _Walker(buf, h.byte_order)
        w.off = 16  # magic, version, tensor count
        n_kv = w.scalar("Q")
        kind, pieces = None, []
        for _ in range(n_kv):
            key, vtype = w.string(), _value_type(w.scalar("I"))
            if key == "tokenizer.ggml.tokens" and vtype == GGUFValueType.ARRAY:
                item, count = _value_type(w.scalar("I")), w.scalar("Q")
                if item != GGUFValueType.STRING:
                    raise GGUFError(f"tokenizer.ggml.tokens of {h.path} is an array of {item.name}, not of strings.")
                pieces = [w.string() for _ in range(count)]
                continue
            value = w.value(vtype)
            if key == "tokenizer.ggml.model":
                kind = value
    return kind, pieces


class TensorFile:
    """A GGUF file's metadata and tensor table, each tensor's bytes read and dequantized only when asked for.

    The data is memory-mapped, so asking for one tensor (or some rows of one) reads only its bytes:
    a 7 GB model is worked through one tensor at a time. Arrays come back as float32 in numpy's
    row-major order, (ne[1], ne[0]): one row per output of a weight matrix, one row per token of
    ``token_embd``.
    """

    def __init__(self, path: str | os.PathLike):
        h = _parse_header(path)
        self.path = h.path
        self.metadata: dict[str, Any] = {k: _num(v) for k, v in h.metadata.items()}
        self.big_endian = h.byte_order != "<"
        self._tensors = {t.name: t for t in h.tensors}
        self._data = np.memmap(h.path, dtype=np.uint8, mode="r")

    @property
    def names(self) -> list[str]:
        return list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        """The numpy shape of a tensor: ne reversed, (rows, row length)."""
        return tuple(reversed(self._tensors[name].shape))

    def type_name(self, name: str) -> str:
        return self._tensors[name].qtype.name

    def array(self, name: str, rows: list[int] | None = None) -> np.ndarray:
        """Tensor `name` dequantized to float32, or only its `rows` (an embedding lookup reads those alone)."""
        t = self._tensors[name]
        if self.big_endian and t.qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            raise GGUFError(f"{self.path} is a big-endian GGUF with {t.qtype.name} tensors, which this reader cannot decode. "
                            "Use a little-endian model.")
        shape = self.shape(name)
        n_rows = math.prod(shape[:-1])
        raw = self._data[t.offset : t.offset + t.n_bytes].reshape(n_rows, t.n_bytes // max(n_rows, 1))
        if rows is not None:
            raw = raw[np.asarray(rows, dtype=np.int64)]
        if self.big_endian:
            item = np.dtype(np.float32 if t.qtype == GGMLQuantizationType.F32 else np.float16)
            raw = raw.view(item.newbyteorder(">")).astype(item).view(np.uint8)
        try:
            values = dequantize(np.ascontiguousarray(raw), t.qtype)
        except NotImplementedError:
            raise GGUFError(f"{name} of {self.path} is stored as {t.qtype.name}, which gguf {_gguf_version()} cannot "
                            "dequantize.") from None
        out_rows = len(rows) if rows is not None else n_rows
        return np.asarray(values, dtype=np.float32).reshape(out_rows, shape[-1])


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"
