"""Other byte widths of a llama-architecture GGUF, derived tensor by tensor within a fixed memory bound.

The recipe is the one SmolLM2's widths are made with (``smollm2`` calls this module):

* every matrix is dequantized to float32 and encoded again in the width's type: F32 keeps those values,
  F16 and BF16 round them, Q8_0, Q5_1, Q5_0, Q4_1 and Q4_0 are gguf's own quantizers;
* a matrix already stored in the width's type is copied as it is (quantizing it again would not give
  its bytes back);
* one-dimensional tensors (norms, biases) keep their type, except in F32, where every tensor is float32;
* a matrix whose rows do not fill whole blocks of the width's type is written as F16, and the record
  names it;
* every metadata key is copied, and ``general.file_type`` says the width.

Memory: a tensor is read, converted and written a slice of whole rows at a time, at most
``CHUNK_VALUES`` values (one row where a row is longer), with plain file reads rather than a memory
map (whose pages would count as the process's own). Above what the process held before (the metadata
of the open source), the peak is ``memory_bound(chunk_values)``: ``PEAK_BYTES_PER_VALUE`` bytes per value
of a slice (its bytes as stored, its float32 values, the quantizer's work arrays, the bytes it writes;
measured: 9.3) plus ``PEAK_FIXED_BYTES``, whatever the model's size (tests/test_derive.py measures
it in a fresh process). At the default slice that is well under 100 MiB, so the 13.5 GB F16 width of
deepseek-coder-6.7b is made without 27 GB of float32. A slice never cuts a block, and
every step works block by block, so the bytes do not depend on the slice: the same input gives the
same file on every machine.
"""

from __future__ import annotations

import errno
import hashlib
import math
import re
from io import BufferedReader
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from bytesup.errors import BytesupError
from bytesup.files import atomic_path, file_sha256, write_json_atomic
from bytesup.models.gguf import check_gguf

ProgressFn = Callable[[str, float], None]

CHUNK_VALUES = 1 << 22  # values of one tensor converted at a time: 16 MiB as float32
PEAK_BYTES_PER_VALUE = 16  # memory per value of a slice at the peak, at most (measured: 9.3 at 4 Mi values)
PEAK_FIXED_BYTES = 4 << 20  # and what a derivation holds besides its slice (measured: about 1 MiB)
ARCHITECTURES = ("llama",)
SCHEMA_VERSION = 1

# Names the ways models are usually published end with: "-q4_1", ".Q8_0", ".Q4_K_M", "-f16".
_WIDTH_SUFFIX = re.compile(r"[-._](?:f32|f16|bf16|q\d(?:_[0-9a-z]+)*)$", re.IGNORECASE)


def memory_bound(chunk_values: int = CHUNK_VALUES) -> int:
    """Bytes a derivation may add to the process's memory at its peak, at ``chunk_values`` values a slice."""
    return PEAK_BYTES_PER_VALUE * chunk_values + PEAK_FIXED_BYTES


class DeriveError(BytesupError):
    """A model that cannot be derived, or outputs that may not be written (message: what to do)."""


@dataclass(frozen=True)
class Width:
    """One byte width a model can be derived at: a GGML type that gguf can encode."""

    name: str  # as given on the command line: "q8_0"
    type_name: str  # the GGML type: "Q8_0"

    @property
    def ggml_type(self):
        import gguf

        return gguf.GGMLQuantizationType[self.type_name]

    @property
    def file_type(self) -> int:
        """``general.file_type`` of a model whose matrices are of this type (a ``gguf.LlamaFileType``)."""
        import gguf

        kind = "ALL" if self.type_name == "F32" else "MOSTLY"
        return int(gguf.LlamaFileType[f"{kind}_{self.type_name}"])

    @property
    def bytes_per_weight(self) -> float:
        import gguf

        block, size = gguf.GGML_QUANT_SIZES[self.ggml_type]
        return size / block


WIDTHS: dict[str, Width] = {w.name: w for w in (Width(t.lower(), t) for t in (
    "F32", "F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"))}


def parse_widths(text: str) -> list[Width]:
    """``"f16, q8_0,q4_0"`` -> those widths, in that order, each once; anything else is one DeriveError."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WIDTHS]
    if unknown or not names:
        what = f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a width" if unknown else "no width was given"
        raise DeriveError(f"--widths: {what}. Give one or more of {', '.join(WIDTHS)} separated by commas, "
                          "e.g. --widths f16,q8_0,q4_0 (`bytesup model derive --help` says what each one stores).")
    return [WIDTHS[n] for n in dict.fromkeys(names)]


# --------------------------------------------------------------------------- the source


@dataclass
class Source:
    """A GGUF opened for deriving: its metadata fields and tensor table (no tensor data is read here)."""

    path: Path
    reader: Any  # gguf.GGUFReader
    architecture: str


def open_source(path: Path) -> Source:
    """The model at ``path``; a missing, damaged, big-endian or non-llama file is one DeriveError."""
    import gguf

    path = Path(path).expanduser()
    check_gguf(path)  # missing, a folder, not GGUF, a cut header or cut tensor data: GGUFError says which
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise DeriveError(f"The GGUF file {path} is corrupt ({exc}), so no width can be derived from it. Fetch or "
                          "convert the model again.") from None
    if reader.byte_order != "I":
        raise DeriveError(f"{path} is a GGUF written for the other byte order (big-endian). Derive from the "
                          "little-endian file of the model, which llama.cpp and bytesup read on this machine.")
    field_ = reader.fields.get("general.architecture")
    arch = str(field_.contents()) if field_ is not None else None
    if arch not in ARCHITECTURES:
        said = f"a {arch!r} model" if arch else "a model without general.architecture"
        raise DeriveError(f"{path} is {said}. `bytesup model derive` derives {' and '.join(ARCHITECTURES)}-architecture "
                          "models only (SmolLM2, Llama, deepseek-coder, Mistral and others write 'llama'), whose tensors "
                          "it knows how to treat. For other architectures use llama.cpp's llama-quantize.")
    return Source(path, reader, arch)


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of a derived file: where its bytes come from and what they become."""

    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the row, stored contiguously
    source_type: Any  # gguf.GGMLQuantizationType
    target_type: Any
    offset: int  # absolute offset of its data in the source
    source_nbytes: int
    nbytes: int
    fallback: bool  # rows do not fill the width's blocks: written as F16

    @property
    def rows(self) -> int:
        return math.prod(self.ne[1:])


def _can_dequantize(qtype) -> bool:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    try:
        gguf.quants.dequantize(np.zeros((1, size), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def plan(source: Source, width: Width) -> list[TensorPlan]:
    """Every tensor in file order with the type it gets in ``width`` (see the module's rules)."""
    import gguf

    T = gguf.GGMLQuantizationType
    integers = {T.I8, T.I16, T.I32, T.I64}
    out: list[TensorPlan] = []
    for t in source.reader.tensors:
        ne = tuple(int(x) for x in t.shape)
        stype = t.tensor_type
        fallback = False
        if width.type_name == "F32":
            target = T.F32
        elif len(ne) == 1 or stype == width.ggml_type or stype in integers:
            target = stype  # copied as it is
        else:
            target = width.ggml_type
            if ne[0] % gguf.GGML_QUANT_SIZES[target][0]:
                target, fallback = T.F16, True
        if target != stype and not _can_dequantize(stype):
            raise DeriveError(f"{t.name} of {source.path} is stored as {stype.name}, which the installed gguf cannot "
                              f"dequantize, so it cannot become {target.name}. Derive from a file of the model stored "
                              "in F16, BF16, F32 or Q8_0 (or upgrade gguf).")
        block, size = gguf.GGML_QUANT_SIZES[target]
        nbytes = ne[0] // block * size * math.prod(ne[1:])
        out.append(TensorPlan(t.name, ne, stype, target, int(t.data_offset), int(t.n_bytes), nbytes, fallback))
    return out


# --------------------------------------------------------------------------- converting


def convert(raw: np.ndarray, source_type, target_type) -> np.ndarray:
    """Whole rows of one tensor, ``raw`` as stored (uint8, one row per line), in ``target_type``'s bytes."""
    import gguf

    if source_type == target_type:
        return raw
    values = gguf.quants.dequantize(raw, source_type).astype(np.float32, copy=False)
    return gguf.quants.quantize(values, target_type)


def _slices(src: BufferedReader, p: TensorPlan, chunk_values: int) -> Iterator[np.ndarray]:
    """The converted tensor, a slice of whole rows at a time, read from the source file as it goes."""
    rows = p.rows
    row_in, row_out = p.source_nbytes // rows, p.nbytes // rows
    step = max(1, chunk_values // p.ne[0])
    for first in range(0, rows, step):
        n = min(step, rows - first)
        raw = np.empty((n, row_in), dtype=np.uint8)
        src.seek(p.offset + first * row_in)
        if src.readinto(raw.data) != raw.nbytes:
            raise DeriveError(f"{src.name} ended inside tensor {p.name}: the file changed or was cut while it was "
                              "read. Check the file and run the command again.")
        out = np.ascontiguousarray(convert(raw, p.source_type, p.target_type))
        if out.nbytes != n * row_out:
            raise DeriveError(f"{p.name}: {out.nbytes} bytes came out of {n} rows where {n * row_out} were planned.")
        del raw
        yield out.view(np.uint8).reshape(-1)


def _copy_fields(writer, source: Source, width: Width) -> None:
    import gguf

    skip = ("general.architecture", "general.alignment", "general.file_type")
    for f in source.reader.fields.values():
        if f.name.startswith("GGUF.") or f.name in skip:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    align = source.reader.fields.get("general.alignment")
    if align is not None:
        writer.add_custom_alignment(int(align.contents()))
    writer.add_file_type(width.file_type)


@dataclass(frozen=True)
class Derived:
    """One file written: what it is, its size and hash, and what its tensors became."""

    path: Path
    width: Width
    bytes: int
    sha256: str
    tensor_bytes: int
    tensor_types: dict[str, int]  # GGML type name -> tensors of that type
    fallback_f16: list[str] = field(default_factory=list)

    def record(self, source: Path, source_sha256: str, chunk_values: int) -> dict:
        """The JSON sidecar: enough to tell the file from any other and to say how it was made."""
        return {
            "schema_version": SCHEMA_VERSION,
            "file": self.path.name,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "width": self.width.name,
            "weight_type": self.width.type_name,
            "file_type": self.width.file_type,
            "tensor_bytes": self.tensor_bytes,
            "tensor_types": self.tensor_types,
            "fallback_f16": self.fallback_f16,
            "source": {"file": source.name, "bytes": source.stat().st_size, "sha256": source_sha256},
            "made_by": "bytesup model derive: dequantized to float32, then encoded in the width's type",
            "chunk_values": chunk_values,
        }


def _disk_error(exc: OSError, out: Path, needed: int) -> DeriveError:
    if exc.errno == errno.ENOSPC:
        return DeriveError(f"The disk holding {out.parent} is full ({exc.strerror}); {out.name} needs {needed:,} bytes. "
                           "Nothing was left half-written. Free some space, or write elsewhere with --out DIR, and run "
                           "the command again.")
    return DeriveError(f"Could not write {out}: {exc.strerror or exc}. Nothing was left half-written. Check that the folder "
                       "is writable, or choose another with --out DIR.")


def _pad(fh: BinaryIO, h, align: int) -> None:
    pad = -fh.tell() % align
    if pad:
        zeros = bytes(pad)
        h.update(zeros)
        fh.write(zeros)


def write_width(source: Source, width: Width, out: Path, progress: ProgressFn | None = None,
                chunk_values: int = CHUNK_VALUES, label: str | None = None) -> Derived:
    """Write ``source`` at ``width`` to ``out`` (atomically, replacing a file there) and hash it as it is written."""
    import gguf

    report = progress or (lambda message, fraction: None)
    label = label or width.name
    tensors = plan(source, width)
    total = sum(p.nbytes for p in tensors) or 1
    needed = total + source.reader.data_offset
    try:
        with atomic_path(out) as tmp:
            writer = gguf.GGUFWriter(tmp, source.architecture)
            try:
                _copy_fields(writer, source, width)
                for p in tensors:  # numpy order (rows first); raw_dtype states the stored type
                    writer.add_tensor_info(p.name, tuple(reversed(p.ne)), np.dtype(np.float32), p.nbytes,
                                           raw_dtype=p.target_type)
                writer.write_header_to_file()
                writer.write_kv_data_to_file()
                writer.write_ti_data_to_file()
            finally:
                writer.close()
            align = writer.data_alignment
            h = hashlib.sha256()
            with open(tmp, "rb+") as fh, open(source.path, "rb") as src:
                for head in iter(lambda: fh.read(1 << 20), b""):
                    h.update(head)
                done = 0
                for p in tensors:
                    _pad(fh, h, align)
                    for piece in _slices(src, p, chunk_values):
                        h.update(piece.data)
                        _write(fh, piece)
                    _pad(fh, h, align)
                    done += p.nbytes
                    report(f"{label}: {p.name}", done / total)
                size = fh.tell()
    except OSError as exc:
        raise _disk_error(exc, out, needed) from None
    types = Counter(p.target_type.name for p in tensors)
    return Derived(out, width, size, h.hexdigest(), total, dict(sorted(types.items())),
                   [p.name for p in tensors if p.fallback])


def _write(fh: BinaryIO, piece: np.ndarray) -> None:
    fh.write(piece.data)


# --------------------------------------------------------------------------- the command


def output_path(source: Path, width: Width, out_dir: Path | None = None) -> Path:
    """``deepseek-coder-6.7b-instruct.Q8_0.gguf`` at f16 -> ``deepseek-coder-6.7b-instruct-f16.gguf``, beside the
    source or in ``out_dir``. SmolLM2's ``smollm2-135m-q4_1.gguf`` gives the names of its catalog widths."""
    base = _WIDTH_SUFFIX.sub("", source.stem) or source.stem
    return (out_dir if out_dir is not None else source.parent) / f"{base}-{width.name}.gguf"


def record_path(gguf_path: Path) -> Path:
    """Where a derived file's JSON record lives: beside it, ``NAME.gguf.json``."""
    return gguf_path.with_name(gguf_path.name + ".json")


def check_outputs(source: Path, outputs: list[Path], force: bool) -> None:
    """Refuse, before any work, outputs that would replace the source, a folder, or (without ``force``) a file."""
    for out in outputs:
        if out.resolve() == source.resolve():
            raise DeriveError(f"{out} would replace the model it is derived from: that width is the source's own. Leave "
                              "it out of --widths, or write elsewhere with --out DIR.")
        if out.is_dir():
            raise DeriveError(f"{out} is a folder, so the width cannot be written there. Move it, or write elsewhere with "
                              "--out DIR.")
    taken = [o for o in outputs if o.exists() or record_path(o).exists()]
    if taken and not force:
        one = len(taken) == 1
        raise DeriveError(f"{', '.join(str(o) for o in taken)} already {'exists' if one else 'exist'}, and nothing was "
                          f"written. Add --force to derive again and replace {'it' if one else 'them'} (with "
                          f"{'its .json record' if one else 'their .json records'}), or write elsewhere with --out DIR.")


def derive(source_path: Path, widths: list[Width], out_dir: Path | None = None, force: bool = False,
           progress: ProgressFn | None = None, chunk_values: int = CHUNK_VALUES) -> list[Derived]:
    """Every width of ``source_path`` asked for, each with its JSON record beside it (``record_path``)."""
    source = open_source(source_path)
    outputs = [output_path(source.path, w, out_dir) for w in widths]
    check_outputs(source.path, outputs, force)
    source_sha = file_sha256(source.path)
    done = []
    for width, out in zip(widths, outputs, strict=True):
        made = write_width(source, width, out, progress, chunk_values)
        write_json_atomic(record_path(out), made.record(source.path, source_sha, chunk_values))
        done.append(made)
    return done
