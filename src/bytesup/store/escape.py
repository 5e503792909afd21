"""The two escaping functions for text that comes from outside (the user, a file, a server).

- `rich_text`: before rich sees a string (console messages, rich tables), so that `[/red]` in a
  server's answer or `[bold]` in a path is shown as typed, never read as markup.
- `md_text`: before a string goes into Markdown (table cells, notes, titles, headers), so that a
  GGUF `general.name` of `<script>`, a `[x](javascript:…)` link or a `## heading` stays text.
  It escapes only what Markdown or HTML would read as syntax: `|`, backticks, `*` and `~` in a table cell (where
  they come from outside: a token piece such as ``` `` ``` or ` *` renders as typed), raw HTML (`<` before a tag or
  comment), entities, link and image brackets, line breaks, and block markers at the start of a
  note. Plain text such as `i <` or `[depth=512]` is left as it is.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape as _rich_escape

_HTML = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_LINK = re.compile(r"\](?=[(\[])")
_PIPE = re.compile(r"(\\*)\|")
_INLINE = re.compile(r"[`*~]")  # code spans, emphasis, strikethrough: in a cell they come from outside (token pieces)
_BLOCK_START = re.compile(r"^(?:[#>]|[-+*](?=\s)|\d+[.)](?=\s)|```|~~~|\[(?=[^\]]*\]:))")


def rich_text(value: Any) -> str:
    """`value` as text that rich prints literally."""
    return _rich_escape(str(value))


def md_text(value: Any, newline: str = " ", cell: bool = False) -> str:
    """`value` as Markdown text that renders as written (one line; line breaks become `newline`).
    `cell`: for a table cell, where `|` ends the cell; elsewhere on one line it is plain text."""
    text = str(value).replace("\r\n", "\n").replace("\r", "\n").replace("\n", newline)
    if cell:
        text = _PIPE.sub(lambda m: m.group(1) * 2 + "\\|", text)
        text = _INLINE.sub(lambda m: "\\" + m.group(0), text)
    text = _ENTITY.sub("&amp;", text)
    text = _HTML.sub("&lt;", text)
    text = _LINK.sub("\\\\]", text)
    return _BLOCK_START.sub(lambda m: "\\" + m.group(0), text)
