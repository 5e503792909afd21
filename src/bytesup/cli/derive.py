"""`bytesup model derive`: other byte widths of any llama-architecture GGUF, for the capstone's --sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from bytesup.cli.common import err, fail, out
from bytesup.errors import BytesupError
from bytesup.models import catalog
from bytesup.models import derive
from bytesup.store.escape import rich_text

DEFAULT_WIDTHS = "f16,q8_0,q4_0"


def _help() -> str:
    """The command's help; each block that starts with a line of \\b alone (a table, commands to type) is printed as
    written, not wrapped again."""
    rows = "\n".join(f"  {w.name:<5} {w.bytes_per_weight:g} bytes a weight ({w.type_name})" for w in derive.WIDTHS.values())
    bound = derive.memory_bound() / 2**20
    return f"""Derive other byte widths of a llama-architecture GGUF, the way SmolLM2's widths are made.

Decode reads every weight once per token, so the same model at several widths is the capstone's
experiment: time per token against bytes per token. This command makes those files from one GGUF:
every matrix is dequantized to float32, then stored again in the width's type (rounded to F16 or
BF16, or quantized by gguf's own Q8_0, Q5_1, Q5_0, Q4_1 or Q4_0 quantizer); a matrix already in that
type is copied; norms and other one-dimensional tensors keep their type (F32 turns everything into
float32); a matrix whose rows do not fill whole blocks stays F16, and its record says so.

\b
Widths (--widths, comma-separated):
{rows}

It works a slice of rows at a time (at most {derive.CHUNK_VALUES:,} values), so memory stays within
{bound:.0f} MiB above what holding the source's metadata takes, whatever the model's size: deepseek-coder-6.7b's F16 (13.5 GB)
needs no 27 GB of float32. The same input gives the same bytes on every machine. Each file is written
under a temporary name and renamed when whole; its sha256 is printed and kept in NAME.gguf.json beside it,
with the source's. Existing outputs are never replaced without --force.

\b
On a DGX Spark, with the course's model:
  M=models/deepseek-coder-6.7b-instruct
  bytesup model derive $M.Q8_0.gguf --widths f16,q4_0
  bytesup run 08_capstone_decode_memory_bound --bandwidth-gbs 273 \\
      --sizes $M-q4_0.gguf,$M.Q8_0.gguf,$M-f16.gguf
"""


def _source(model: str) -> Path:
    """A path as given, or the file of a model `bytesup model build` knows by name."""
    path = Path(model).expanduser()
    if path.exists() or model not in catalog.model_names():
        return path
    path = catalog.default_model_path(model)
    if not path.exists():
        raise BytesupError(f"{model} is a model bytesup knows, but {path} is not built yet. Run `bytesup model build "
                           f"{model}` first, then derive from it.")
    return path


def register(model_app: typer.Typer) -> None:
    """Add `derive` to the `bytesup model` group (cli/app.py calls this once)."""

    @model_app.command("derive", help=_help())
    def model_derive(
        model: Annotated[str, typer.Argument(help=(
            "the GGUF to derive from (a path, or the name of a model `bytesup model build` wrote)"), show_default=False)],
        width_list: Annotated[str, typer.Option("--widths", help=(
            f"widths to write, comma-separated, from {', '.join(derive.WIDTHS)}"))] = DEFAULT_WIDTHS,
        out_dir: Annotated[Optional[Path], typer.Option("--out", help=(
            "folder for the new files (default: the source's folder); each is named after the source, its width "
            "suffix replaced: NAME-f16.gguf"))] = None,
        force: Annotated[bool, typer.Option("--force", help="replace outputs (and their records) that exist")] = False,
    ) -> None:
        try:
            chosen = derive.parse_widths(width_list)
            source = _source(model)
            with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                          TimeElapsedColumn(), console=err, transient=True) as bar:
                tasks: dict[str, TaskID] = {}

                def progress(message: str, fraction: float) -> None:  # after each tensor; fraction by bytes written
                    label, _, tensor = message.partition(": ")
                    task = tasks.setdefault(label, bar.add_task(label, total=1.0))
                    bar.update(task, completed=fraction, description=rich_text(f"{label}: {tensor}"[:60]))

                made = derive.derive(source, chosen, out_dir, force, progress)
        except BytesupError as exc:
            raise fail(exc) from None
        for d in made:
            out.print(rich_text(f"derived {d.path} ({d.width.type_name}, {d.bytes:,} bytes, sha256 {d.sha256}; "
                                f"record {derive.record_path(d.path).name})"), soft_wrap=True)
            if d.fallback_f16:
                out.print(rich_text(f"  {len(d.fallback_f16)} matrices kept as F16 (rows not a whole number of "
                                    f"{d.width.type_name} blocks): {', '.join(d.fallback_f16[:4])}"), soft_wrap=True)
        sizes = ",".join(str(p) for p in sorted({source, *(d.path for d in made)}, key=lambda p: p.stat().st_size))
        out.print(rich_text(f"next: bytesup run 08_capstone_decode_memory_bound --sizes {sizes}"), soft_wrap=True)
