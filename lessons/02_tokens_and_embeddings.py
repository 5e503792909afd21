"""Lesson 2 — Tokens and embeddings

A model never sees characters: the tokenizer cuts text into pieces from a fixed vocabulary and
hands the model their ids. This script sends short texts through the server's /tokenize (with
pieces) and back through /detokenize, so the pieces show how spacing, code, numbers and non-ASCII
text are cut (a space belongs to the token after it; bytes of a character can land in separate
tokens). It reads the vocabulary size from the server and, where the model file is readable
here, from the file, then follows one id into the model: the id selects one row of the token_embd
matrix, a vector as wide as the model, read straight from the GGUF file. Against a remote server
without --model only the server's side is shown.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup.models.gguf import embedding_row, is_synthetic_metadata, read_model_info
from bytesup.lesson import LessonContext
from bytesup.llama.responses import ModelList, Props, Tokenized, TokenPiece, shown_token
from bytesup.store.rows import cells, column, columns

TITLE = "Tokens and embeddings"

# The texts of the lesson: spacing, code, numbers, non-ASCII. Tokenizing samples nothing, so there
# is no seed, temperature or prompt cache to pin; add_special=False keeps BOS out of the counts.
TEXTS = [
    "Paris",
    " Paris",
    "The capital of France is Paris",
    "a==b",
    "a == b",
    "def fibonacci(n):\n    if n == 0:",
    "3.14159",
    "2026",
    "café",
    "Zürich",
    "🦙",
]
EMBEDDING_TEXTS = (" Paris", "Paris")  # the two whose rows are read and compared
SHOW_NUMBERS = 8  # leading numbers of an embedding row shown in the table


# --- requests: the server's tokenizer, and reads of the model file -----------------------------

def tokenize_texts(ctx: LessonContext, texts: list[str]) -> list["TextTokens"]:
    """Each text through /tokenize (ids with pieces, no BOS) and its ids back through /detokenize."""
    out = []
    for text in ctx.track(texts, "texts"):
        pieces = pieces_of(ctx.server.tokenize(text, with_pieces=True, add_special=False))
        back = ctx.server.detokenize([p.id for p in pieces]).content
        out.append(TextTokens(text=text, pieces=pieces, detokenized=back))
    return out


def model_facts(path: str | Path) -> dict:
    """What this lesson needs from the GGUF header (the full tensor list stays in lesson 1)."""
    info = read_model_info(path)
    shapes = {t["name"]: t for t in info["tensors"] if t["name"] in ("token_embd.weight", "output.weight")}
    return {
        "name": info["name"],
        "description": info["metadata"].get("general.description"),
        "hyperparameters": info["hyperparameters"],
        "tokens_in_vocabulary": info["metadata"].get("tokenizer.ggml.tokens", {}).get("length"),
        "token_embd": shapes.get("token_embd.weight"),
        "output": shapes.get("output.weight"),
    }


def readable_model_facts(ctx: LessonContext) -> dict | None:
    """model_facts of the served model, or None when no model file is readable here (a remote
    server without --model). A file that is there but is not a valid GGUF still fails loudly."""
    path = ctx.readable_model()
    return model_facts(path) if path else None


def model_file_facts(ctx: LessonContext) -> dict | None:
    """The model file's facts, recorded as the host value model_info (a file read)."""
    return ctx.host("model_info", lambda: readable_model_facts(ctx))


def server_answers(ctx: LessonContext) -> tuple[Props, ModelList]:
    """/props and /v1/models, where the server may state its vocabulary size."""
    return ctx.server.props(), ctx.server.models()


def read_embedding_rows(ctx: LessonContext, ids: list[int]) -> dict[str, list[float]]:
    """The token_embd rows of `ids`, read from the GGUF and recorded as the host value embedding_rows."""
    return ctx.host("embedding_rows", lambda: {str(i): embedding_row(ctx.require_model(), i) for i in ids})


def skipped_reason(ctx: LessonContext) -> str:
    """Why the model file is not read: where the server runs and whether a file was named."""
    facts = ctx.server_facts()
    if not facts["local"]:
        return f"the server runs on {facts['url_host']}"
    return "the server did not name a file that this host can read"


# --- computation: tokens ------------------------------------------------------------------------

def pieces_of(tok: Tokenized) -> list[TokenPiece]:
    pieces = [t for t in tok.tokens if isinstance(t, TokenPiece)]
    if len(pieces) != len(tok.tokens):
        raise ValueError("the server returned ids without pieces; this lesson asks /tokenize for with_pieces")
    return pieces


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


def token_counts(texts: list[TextTokens]) -> TokenCounts:
    return TokenCounts(texts=len(texts), round_trips=sum(t.round_trip_ok for t in texts),
                       characters=sum(t.characters for t in texts), tokens=sum(t.n_tokens for t in texts),
                       largest_id=max(i for t in texts for i in t.ids))


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


# --- computation: vocabulary and embedding rows ---------------------------------------------------

def find_key(data: Any, key: str) -> Any:
    """The first value stored under `key` anywhere in nested dicts/lists, else None."""
    items: list[Any]
    if isinstance(data, dict):
        if key in data:
            return data[key]
        items = list(data.values())
    elif isinstance(data, list):
        items = data
    else:
        return None
    for v in items:
        found = find_key(v, key)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class ServedVocabulary:
    """The vocabulary size as the server states it: /v1/models' meta n_vocab and /props' (None: not stated)."""
    models_n_vocab: Any
    props_n_vocab: Any


def served_vocabulary(props: Props, models: ModelList) -> ServedVocabulary:
    data = models.model_dump(mode="json").get("data") or [{}]
    meta = data[0].get("meta") or {}
    return ServedVocabulary(models_n_vocab=meta.get("n_vocab"), props_n_vocab=find_key(props.model_dump(mode="json"), "n_vocab"))


@dataclass(frozen=True)
class VocabularySource:
    source: str = column("source")
    entries: Any = column("entries")  # an int, or None where the source states no size


def vocabulary_sources(facts: dict | None, served: ServedVocabulary) -> list[VocabularySource]:
    """Every place that states the vocabulary size: the file (where readable here), then the server.
    A GGUF shape is [row length, rows], so a matrix's second number counts its rows."""
    sources = []
    if facts:
        embd, out = facts["token_embd"], facts["output"]
        sources += [
            VocabularySource("GGUF: tokenizer.ggml.tokens (entries)", facts["tokens_in_vocabulary"]),
            VocabularySource("GGUF: token_embd rows", embd["shape"][1] if embd else None),
            VocabularySource("GGUF: output rows (one score per entry)", out["shape"][1] if out else None),
        ]
    return sources + [VocabularySource("server: /v1/models meta n_vocab", served.models_n_vocab),
                      VocabularySource("server: /props n_vocab", served.props_n_vocab)]


def reported_sizes(sources: list[VocabularySource]) -> list[int]:
    return [s.entries for s in sources if isinstance(s.entries, int)]


def model_n_vocab(facts: dict | None, served: ServedVocabulary) -> int | None:
    """The vocabulary size: the file's hyperparameter, else the server's /v1/models meta."""
    hp = facts["hyperparameters"] if facts else {}
    n_vocab = hp.get("n_vocab") if isinstance(hp.get("n_vocab"), int) else served.models_n_vocab
    return n_vocab if isinstance(n_vocab, int) else None


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


def embedding_rows(chosen: list[TextTokens], rows_by_id: dict[str, list[float]], width: int) -> list[EmbeddingRow]:
    return [EmbeddingRow(text=t.text, token=t.pieces[0], n_tokens=t.n_tokens, row=rows_by_id[str(t.pieces[0].id)], width=width)
            for t in chosen]


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


def lookup_row(r: EmbeddingRow) -> LookupRow:
    return LookupRow(repr(r.text), r.token.id, piece_text(r.token), len(r.row), r.width, r.length_is_width, r.first,
                     l2_norm(r.row), l2_norm(r.first))


def model_width(facts: dict) -> int:
    """n_embd from the file's hyperparameters, else token_embd's row length."""
    n_embd = facts["hyperparameters"].get("n_embd")
    return n_embd if isinstance(n_embd, int) else facts["token_embd"]["shape"][0]


def row_bytes(embd: dict) -> int:
    """Bytes of one token_embd row: the tensor's bytes over its rows (shape [row length, rows])."""
    return embd["n_bytes"] // embd["shape"][1]


# --- rendering ------------------------------------------------------------------------------------

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


def render_tokenization(ctx: LessonContext, texts: list[TextTokens], counts: TokenCounts) -> None:
    by_text = {t.text: t for t in texts}
    code = next(t for t in texts if t.text.startswith("def "))
    ctx.table(
        "tokenization", "Text → tokens → text",
        columns(TextRow), cells([text_row(t) for t in texts]),
        notes=[
            f"{counts.round_trips} of {counts.texts} texts came back unchanged from /detokenize.",
            leading_space_note({t: by_text[t].ids for t in ("Paris", " Paris")}),
            equals_note(by_text["a==b"], by_text["a == b"]),
            whitespace_note(code.pieces),
            f"'3.14159' took {by_text['3.14159'].n_tokens} tokens and '2026' took {by_text['2026'].n_tokens}.",
            (f"Over all {counts.texts} texts: {counts.characters} characters in {counts.tokens} tokens, "
             f"{counts.characters_per_token:.2f} characters per token."),
        ],
    )


def render_tokens(ctx: LessonContext, texts: list[TextTokens], counts: TokenCounts) -> None:
    by_text = {t.text: t for t in texts}
    emoji = by_text[TEXTS[-1]]
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
    ctx.table(
        "tokens", "Every token: id, piece and bytes",
        columns(PieceRow), cells(piece_rows(texts)),
        notes=notes,
    )


def vocabulary_note(reported: list[int]) -> str:
    sizes = sorted(set(reported))
    if not sizes:
        return "No source reports a vocabulary size."
    if len(reported) == 1:
        return f"One source reports a size: {sizes[0]:,}."
    verdict = "all agree" if len(sizes) == 1 else "disagree"
    return f"{len(reported)} sources report a size; they {verdict}: {', '.join(f'{v:,}' for v in sizes)}."


def render_vocabulary(ctx: LessonContext, facts: dict | None, served: ServedVocabulary, counts: TokenCounts,
                      not_read: str | None) -> None:
    """`not_read`: why the model file was not read (None when it was)."""
    sources = vocabulary_sources(facts, served)
    n_vocab = model_n_vocab(facts, served)
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
    ctx.table("vocabulary", "Vocabulary size", columns(VocabularySource), cells(sources), notes=notes)


def render_embeddings(ctx: LessonContext, facts: dict, rows: list[EmbeddingRow]) -> None:
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
    ctx.table(
        "embedding_rows", "One id, one row of token_embd",
        columns(LookupRow), cells([lookup_row(r) for r in rows]),
        notes=notes,
    )


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"with_pieces": True, "add_special": False})

    # 1. Text -> ids and pieces -> text.
    ctx.step("tokenizing and detokenizing the lesson's texts")
    texts = tokenize_texts(ctx, TEXTS)
    counts = token_counts(texts)
    render_tokenization(ctx, texts, counts)

    # 2. Every token: id, piece and its bytes.
    render_tokens(ctx, texts, counts)

    # 3. Vocabulary size: the server, and the file where it is readable here.
    facts = model_file_facts(ctx)
    served = served_vocabulary(*server_answers(ctx))
    not_read = skipped_reason(ctx) if facts is None else None
    render_vocabulary(ctx, facts, served, counts, not_read)

    # 4. An id selects one row of token_embd: the first token of each of EMBEDDING_TEXTS.
    embd = facts["token_embd"] if facts else None
    if facts is None or embd is None or len(embd["shape"]) != 2:
        why = f"the model file is not readable here ({not_read})" if facts is None else "the file has no 2-D token_embd.weight"
        ctx.note(f"The embedding rows are skipped: {why}.")
        return ctx.finish()
    ctx.step("reading embedding rows from the GGUF")
    chosen = [next(t for t in texts if t.text == text) for text in EMBEDDING_TEXTS]
    rows_by_id = read_embedding_rows(ctx, [t.pieces[0].id for t in chosen])
    render_embeddings(ctx, facts, embedding_rows(chosen, rows_by_id, model_width(facts)))
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
