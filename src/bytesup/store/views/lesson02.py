"""Lesson 2's view: the records of texts cut into tokens, of the vocabulary and of embedding rows, and the tables
and notes that show them. Each table is built from the records by their declared columns (`store.rows.column`);
nothing here asks the server or reads the model file."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bytesup.llama.responses import TokenPiece, shown_token
from bytesup.models.gguf import is_synthetic_metadata
from bytesup.store.results import Plot, Series, Table
from bytesup.store.rows import column
from bytesup.store.views import table

SHOW_NUMBERS = 8  # leading numbers of an embedding row shown in the table


# --- the records ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TextTokens:
    """One text as the server cut it, and what /detokenize made of its ids."""
    text: str
    pieces: list[TokenPiece]
    detokenized: str

    @property
    def characters(self) -> int:
        return len(self.text)

    @property
    def utf8_bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    @property
    def n_tokens(self) -> int:
        return len(self.pieces)

    @property
    def characters_per_token(self) -> float:
        return self.characters / self.n_tokens

    @property
    def ids(self) -> list[int]:
        return [p.id for p in self.pieces]

    @property
    def round_trip_ok(self) -> bool:
        return self.detokenized == self.text

    @property
    def pieces_as_bytes(self) -> int:
        """Pieces that are not valid UTF-8 on their own (they arrive as byte lists)."""
        return sum(isinstance(p.piece, list) for p in self.pieces)

    @property
    def pieces_rejoin(self) -> bool:
        """Whether the pieces' bytes, joined, are the text's UTF-8 bytes."""
        return b"".join(p.piece_bytes for p in self.pieces) == self.text.encode("utf-8")


@dataclass(frozen=True)
class TokenCounts:
    """All texts together."""
    texts: int
    round_trips: int  # texts that came back unchanged
    characters: int
    tokens: int
    largest_id: int

    @property
    def characters_per_token(self) -> float:
        return self.characters / self.tokens


@dataclass(frozen=True)
class ServedVocabulary:
    """The vocabulary size as the server states it: /v1/models' meta n_vocab and /props' (None: not stated)."""
    models_n_vocab: Any
    props_n_vocab: Any


@dataclass(frozen=True)
class VocabularySource:
    source: str = column("source")
    entries: Any = column("entries")  # an int, or None where the source states no size


def l2_norm(values: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values))


def cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / (l2_norm(a) * l2_norm(b))


@dataclass(frozen=True)
class EmbeddingRow:
    """The token_embd row that a text's first token id selects."""
    text: str
    token: TokenPiece  # the text's first token
    n_tokens: int      # tokens of the whole text
    row: list[float]
    width: int         # the model width

    @property
    def first(self) -> list[float]:
        return self.row[:SHOW_NUMBERS]

    @property
    def length_is_width(self) -> bool:
        return len(self.row) == self.width


@dataclass(frozen=True)
class LookupRow:
    """An embedding row as its table shows it: the id, its piece, its length and norms, and its first numbers."""
    text: str = column("text")
    id: int = column("id")
    piece: str = column("piece")
    length: int = column("row length")
    width: int = column("model width")
    length_is_width: bool = column("length = width")
    first: list[float] = column(f"first {SHOW_NUMBERS} numbers")
    norm: float = column("L2 norm of the row")
    first_norm: float = column(f"L2 norm of the first {SHOW_NUMBERS}")


# The columns of an embedding row the main text shows; the checks of its length are in the full table.
LOOKUP_SHOWN = ["text", "id", "piece", "length", "first", "norm"]


def lookup_row(r: EmbeddingRow) -> LookupRow:
    return LookupRow(repr(r.text), r.token.id, piece_text(r.token), len(r.row), r.width, r.length_is_width, r.first,
                     l2_norm(r.row), l2_norm(r.first))



# --- tables and their notes ---------------------------------------------------------------------

def pieces_with(tokens: TextTokens, part: bytes) -> list[TokenPiece]:
    """The text's pieces whose bytes contain `part`."""
    return [p for p in tokens.pieces if part in p.piece_bytes]


def piece_text(piece: TokenPiece) -> str:
    """A piece with its spacing visible: repr of the text, or of the bytes when not valid UTF-8."""
    if isinstance(piece.piece, list):
        return shown_token("", piece.piece)
    return shown_token(piece.piece)


def piece_hex(piece: TokenPiece) -> str:
    return piece.piece_bytes.hex(" ")


@dataclass(frozen=True)
class TextRow:
    text: str = column("text")
    characters: int = column("characters")
    utf8_bytes: int = column("UTF-8 bytes")
    tokens: int = column("tokens")
    characters_per_token: float = column("characters per token")
    pieces: list[str] = column("pieces")
    detokenized: str = column("detokenized")
    round_trip_ok: bool = column("round trip ok")


def text_row(t: TextTokens) -> TextRow:
    return TextRow(repr(t.text), t.characters, t.utf8_bytes, t.n_tokens, t.characters_per_token,
                   [piece_text(p) for p in t.pieces], repr(t.detokenized), t.round_trip_ok)


@dataclass(frozen=True)
class PieceRow:
    text: str = column("text")
    position: int = column("position")
    id: int = column("id")
    piece: str = column("piece")
    hex: str = column("piece bytes", "hex")
    as_bytes: bool = column("piece sent as bytes")


def piece_rows(texts: list[TextTokens]) -> list[PieceRow]:
    """Every token of every text, in order."""
    return [PieceRow(repr(t.text), i, p.id, piece_text(p), piece_hex(p), isinstance(p.piece, list))
            for t in texts for i, p in enumerate(t.pieces)]


def row_bytes(embd: dict) -> int:
    """Bytes of one token_embd row: the tensor's bytes over its rows (shape [row length, rows])."""
    return embd["n_bytes"] // embd["shape"][1]


def leading_space_note(ids: dict[str, list[int]]) -> str:
    plain, spaced = ids["Paris"], ids[" Paris"]
    if plain != spaced:
        return (f"'Paris' is ids {plain} and ' Paris' is ids {spaced}: different ids, "
                "so the leading space is part of the token.")
    return f"'Paris' and ' Paris' are both ids {plain}: this tokenizer gives the leading space no token of its own here."


def equals_note(tight: TextTokens, spaced: TextTokens) -> str:
    """'a==b' against 'a == b': token counts and the pieces that carry the '='."""
    a, b = pieces_with(tight, b"="), pieces_with(spaced, b"=")
    shared = set(p.id for p in a) & set(p.id for p in b)
    return (f"{tight.text!r} took {tight.n_tokens} tokens and {spaced.text!r} took {spaced.n_tokens}; their '=' pieces are "
            f"{', '.join(piece_text(p) for p in a) or 'none'} and {', '.join(piece_text(p) for p in b) or 'none'}, "
            f"{'sharing some ids' if shared else 'with no id in common'}.")


def whitespace_note(pieces: list[TokenPiece]) -> str:
    """What became of the code line's newline and indentation."""
    alone = [piece_text(p) for p in pieces if p.piece_bytes and p.piece_bytes.strip() == b""]
    if alone:
        return f"In the code line, whitespace-only pieces: {', '.join(alone)}: newline and indentation are tokens too."
    carrying = [piece_text(p) for p in pieces if b"\n" in p.piece_bytes or p.piece_bytes.startswith(b"  ")]
    if carrying:
        return ("In the code line no piece is whitespace alone; the newline and indentation ride inside "
                f"{', '.join(carrying)}.")
    return "In the code line no piece holds the newline or the indentation."


def tokenization(texts: list[TextTokens], counts: TokenCounts) -> Table:
    by_text = {t.text: t for t in texts}
    code = next(t for t in texts if t.text.startswith("def "))
    return table(
        "tokenization", "Text → tokens → text", TextRow, [text_row(t) for t in texts], [
            f"{counts.round_trips} of {counts.texts} texts came back unchanged from /detokenize.",
            leading_space_note({t: by_text[t].ids for t in ("Paris", " Paris")}),
            equals_note(by_text["a==b"], by_text["a == b"]),
            whitespace_note(code.pieces),
            f"'3.14159' took {by_text['3.14159'].n_tokens} tokens and '2026' took {by_text['2026'].n_tokens}.",
            (f"Over all {counts.texts} texts: {counts.characters} characters in {counts.tokens} tokens, "
             f"{counts.characters_per_token:.2f} characters per token."),
        ])


def tokens(texts: list[TextTokens], counts: TokenCounts) -> Table:
    """Every token of every text; the last text is the one whose character is cut into bytes."""
    by_text = {t.text: t for t in texts}
    emoji = texts[-1]
    notes = [
        (f"{emoji.text!r} is {emoji.utf8_bytes} UTF-8 bytes in {emoji.n_tokens} token(s); "
         f"{emoji.pieces_as_bytes} piece(s) are not valid UTF-8 on their own and arrive as byte lists; joined they "
         f"{'are' if emoji.pieces_rejoin else 'are NOT'} the character's bytes."),
        f"Largest id seen: {counts.largest_id}.",
    ] + [
        (f"{t.text!r}: {t.characters} characters, {t.utf8_bytes} UTF-8 bytes, {t.n_tokens} token(s): "
         f"{', '.join(piece_text(p) for p in t.pieces)}.")
        for t in (by_text["café"], by_text["Zürich"])
    ]
    return table("tokens", "Every token: id, piece and bytes", PieceRow, piece_rows(texts), notes)


def reported_sizes(sources: list[VocabularySource]) -> list[int]:
    return [s.entries for s in sources if isinstance(s.entries, int)]


def vocabulary_note(reported: list[int]) -> str:
    sizes = sorted(set(reported))
    if not sizes:
        return "No source reports a vocabulary size."
    if len(reported) == 1:
        return f"One source reports a size: {sizes[0]:,}."
    verdict = "all agree" if len(sizes) == 1 else "disagree"
    return f"{len(reported)} sources report a size; they {verdict}: {', '.join(f'{v:,}' for v in sizes)}."


def vocabulary(sources: list[VocabularySource], n_vocab: int | None, facts: dict | None, served: ServedVocabulary,
               counts: TokenCounts, not_read: str | None) -> Table:
    """`not_read`: why the model file was not read (None when it was)."""
    notes = [vocabulary_note(reported_sizes(sources))]
    if n_vocab is not None:
        notes.append(f"Every id in this lesson is below {n_vocab:,}: {'yes' if counts.largest_id < n_vocab else 'no'} "
                     f"(largest {counts.largest_id:,}).")
    if served.props_n_vocab is None:
        notes.append("/props does not report n_vocab in this build.")
    if facts is None:
        notes.append(f"The model file is not readable here ({not_read}), so the file's vocabulary "
                     "is not listed; pass --model PATH.gguf, the file the server runs, to add it.")
    elif facts["token_embd"] and facts["output"] is None:
        notes.append("The file has no output.weight: the logits reuse token_embd's rows (tied embeddings).")
    return table("vocabulary", "Vocabulary size", VocabularySource, sources, notes)


def tokens_plot(texts: list[TextTokens], counts: TokenCounts) -> Plot:
    """Each text's tokens against its characters, beside the line of the texts' average characters per token."""
    top = max(t.characters for t in texts)
    return Plot(name="tokens_per_text", title="Tokens per text against its characters",
                x_label="characters", y_label="tokens", series=[
                    Series(label=f"all texts: {counts.characters_per_token:.2f} characters per token", x=[0.0, float(top)],
                           y=[0.0, top / counts.characters_per_token], style="dashed"),
                    Series(label="each text", x=[float(t.characters) for t in texts], y=[float(t.n_tokens) for t in texts],
                           style="points")])


def shows(texts: list[TextTokens], counts: TokenCounts, rows: list[EmbeddingRow] | None) -> str:
    """What the run shows: how many tokens the texts took and whether they came back, whether the leading space of
    ' Paris' is part of its token, and (where the file was read) how alike the two rows it selects are."""
    back = ("every one unchanged" if counts.round_trips == counts.texts
            else f"only {counts.round_trips} of {counts.texts} unchanged")
    text = (f"The server cut {counts.texts} texts, {counts.characters} characters, into {counts.tokens} tokens "
            f"({counts.characters_per_token:.2f} characters per token); /detokenize turned the ids back into text, "
            f"{back}.")
    by_text = {t.text: t for t in texts}
    plain, spaced = by_text["Paris"].ids, by_text[" Paris"].ids
    text += (f" 'Paris' is id {', '.join(map(str, plain))} and ' Paris' is id {', '.join(map(str, spaced))}: "
             + ("the leading space is part of the token." if plain != spaced
                else "the same id, so here the leading space has no part in the token."))
    if rows is not None:
        a, b = rows
        text += (f" Each id selects one row of {a.width:,} numbers in token_embd; " +
                 ("both select the same row." if a.token.id == b.token.id else
                  f"the two rows' cosine similarity is {cosine(a.row, b.row):.4f} (1 would be the same direction)."))
    return text


def embedding_rows(facts: dict, rows: list[EmbeddingRow]) -> list[Table]:
    """The rows shown in the main text (text, id, piece, length, first numbers, norm), then the full table under
    Details with the checks of each row's length against the model width; the notes are the main table's."""
    embd = facts["token_embd"]
    a, b = rows
    same = a.token.id == b.token.id
    notes = [
        (f"token_embd is {embd['shape'][1]:,} rows of {embd['shape'][0]:,} numbers stored as {embd['type']}; "
         f"looking up one id reads one {row_bytes(embd):,}-byte row."),
        f"Both rows have {a.width:,} numbers, the model width: {'yes' if all(r.length_is_width for r in rows) else 'no'}.",
        (f"Both texts start with id {a.token.id}: the same row." if same else
         f"Ids {a.token.id} and {b.token.id} select rows whose cosine similarity is {cosine(a.row, b.row):.4f} "
         f"(1 = same direction, 0 = unrelated)."),
    ] + [f"{r.text!r} is {r.n_tokens} tokens; the row shown is its first token's." for r in rows if r.n_tokens > 1]
    if is_synthetic_metadata({"general.name": facts.get("name"), "general.description": facts.get("description")}):
        notes.append(f"The file describes itself as {facts['description']!r}: its rows carry no meaning, only shape.")
    looked_up = [lookup_row(r) for r in rows]
    full = table("embedding_rows", "One id, one row of token_embd, every column", LookupRow, looked_up, [])
    full.detail = True
    return [table("embedding_rows_main", "One id, one row of token_embd", LookupRow, looked_up, notes, LOOKUP_SHOWN), full]


