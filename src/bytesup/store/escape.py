"""The escaping functions for text that comes from outside (the user, a file, a server).

- `rich_text`: before rich sees a string (console messages, rich tables), so that `[/red]` in a
  server's answer or `[bold]` in a path is shown as typed, never read as markup.
- `md_literal`: before a string from outside goes into Markdown anywhere (table cells, headings, titles,
  headers, the text of a paragraph or a note), so that it renders as typed: a token piece `_u_`, `__b__`,
  ``` `tick` ``` or `*star*` stays those characters, a GGUF `general.name` of `<script>`, a `[x](javascript:…)`
  link or a `## heading` stays text. It escapes what Markdown or HTML would read as syntax: a backslash before
  punctuation (Markdown would eat it), backticks, `*`, `~`, an `_` that could open or close emphasis (one
  inside a word, as in `n_ubatch`, cannot and is left alone), raw HTML (`<` before a tag or comment),
  entities, link and image brackets, line breaks, block markers at the start, and in a table cell `|`.
  Plain text such as `i <` or `[depth=512]` is left as it is.
- `md_code`: a code span that shows its text as typed: a fence longer than any run of backticks inside,
  nothing else escaped (Markdown reads no entity or tag in a code span), `|` escaped in a table cell.
- `md_text`: the project's own sentences, which may carry code spans of their own (`--repeat`): outside a cell
  only what would make HTML, a link or a block is escaped; in a cell it is `md_literal`.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape as _rich_escape

_HTML = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_LINK = re.compile(r"\](?=[(\[])")
_PIPE = re.compile(r"(\\*)\|")
_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")  # Markdown reads a backslash before ASCII punctuation as an escape
_INLINE = re.compile(r"[`*~]")  # code spans, emphasis, strikethrough
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")  # an _ not between two letters or digits may open or close emphasis
_BLOCK_START = re.compile(r"^(?:[#>]|[-+*](?=\s)|\d+[.)](?=\s)|```|~~~|\[(?=[^\]]*\]:))")


def rich_text(value: Any) -> str:
    """`value` as text that rich prints literally."""
    return _rich_escape(str(value))


def _one_line(value: Any, newline: str) -> str:
    return str(value).replace("\r\n", "\n").replace("\r", "\n").replace("\n", newline)


def _common(text: str) -> str:
    text = _ENTITY.sub("&amp;", text)
    text = _HTML.sub("&lt;", text)
    text = _LINK.sub("\\\\]", text)
    # An ordered list marker is escaped at its dot (`1\.`): a backslash before a digit is no escape in Markdown.
    return _BLOCK_START.sub(lambda m: m.group(0)[:-1] + "\\" + m.group(0)[-1] if m.group(0)[0].isdigit()
                            else "\\" + m.group(0), text)


def md_literal(value: Any, newline: str = " ", cell: bool = False) -> str:
    """`value` as Markdown text that renders exactly as written, on one line (line breaks become `newline`).
    `cell`: for a table cell, where `|` ends the cell."""
    text = _BACKSLASH.sub(r"\\\\", _one_line(value, newline))
    if cell:
        text = _PIPE.sub(lambda m: m.group(1) + "\\|", text)
    text = _INLINE.sub(lambda m: "\\" + m.group(0), text)
    text = _UNDERSCORE.sub(r"\\_", text)
    return _common(text)


def md_text(value: Any, newline: str = " ", cell: bool = False) -> str:
    """The project's own sentence as Markdown on one line: its code spans and emphasis are kept, while raw HTML,
    entities, links and block markers are escaped. In a table cell (`cell`), where the text comes from outside
    (token pieces), it is `md_literal`."""
    if cell:
        return md_literal(value, newline, cell=True)
    return _common(_one_line(value, newline))


def md_code(value: Any, newline: str = " ", cell: bool = False) -> str:
    """`value` as a Markdown code span that shows it as typed (see the module)."""
    text = _one_line(value, newline)
    if cell:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ") and text.strip()) else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else "` `"
