"""What every `bytesup` command shares: the two consoles and the one error printer."""

from __future__ import annotations

import typer
from rich.console import Console

from bytesup.errors import BytesupError
from bytesup.store.escape import rich_text

out = Console()
err = Console(stderr=True)


def fail(exc: BytesupError) -> typer.Exit:
    """Print a BytesupError as one paragraph on stderr; the Exit to raise carries its exit code."""
    err.print(f"[bold red]error:[/bold red] {rich_text(exc)}", highlight=False, soft_wrap=True)
    return typer.Exit(exc.exit_code)
