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

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
from typing import Any

from bytesup.gguf_read import embedding_row, is_synthetic_metadata, read_model_info
from bytesup.records import Tokenized, TokenPiece, shown_token
from bytesup.lesson import LessonContext

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


# --- pure helpers (tested on their own) -------------------------------------------------

def piece_text(piece: TokenPiece) -> str:
    """A piece with its spacing visible: repr of the text, or of the bytes when not valid UTF-8."""
    if isinstance(piece.piece, list):
        return shown_token("", piece.piece)
    return shown_token(piece.piece)


def piece_hex(piece: TokenPiece) -> str:
    return piece.piece_bytes.hex(" ")


def pieces_of(tok: Tokenized) -> list[TokenPiece]:
    if not all(isinstance(t, TokenPiece) for t in tok.tokens):
        raise ValueError("the server returned ids without pieces; this lesson asks /tokenize for with_pieces")
    return list(tok.tokens)  # type: ignore[arg-type]


def l2_norm(values: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values))


def cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b)) / (l2_norm(a) * l2_norm(b))


def find_key(data: Any, key: str) -> Any:
    """The first value stored under `key` anywhere in nested dicts/lists, else None."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        items = data.values()
    elif isinstance(data, list):
        items = data
    else:
        return None
    for v in items:
        found = find_key(v, key)
        if found is not None:
            return found
    return None


def model_facts(path) -> dict:
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


def leading_space_note(ids: dict[str, list[int]]) -> str:
    plain, spaced = ids["Paris"], ids[" Paris"]
    if plain != spaced:
        return (f"'Paris' is ids {plain} and ' Paris' is ids {spaced}: different ids, "
                "so the leading space is part of the token.")
    return f"'Paris' and ' Paris' are both ids {plain}: this tokenizer gives the leading space no token of its own here."


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


def vocabulary_note(reported: list[int]) -> str:
    sizes = sorted(set(reported))
    if not sizes:
        return "No source reports a vocabulary size."
    if len(reported) == 1:
        return f"One source reports a size: {sizes[0]:,}."
    verdict = "all agree" if len(sizes) == 1 else "disagree"
    return f"{len(reported)} sources report a size; they {verdict}: {', '.join(f'{v:,}' for v in sizes)}."


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"with_pieces": True, "add_special": False})

    # 1. Text -> ids and pieces -> text.
    ctx.step("tokenizing and detokenizing the lesson's texts")
    results = {}
    for text in ctx.track(TEXTS, "texts"):
        pieces = pieces_of(ctx.server.tokenize(text, with_pieces=True, add_special=False))
        back = ctx.server.detokenize([p.id for p in pieces]).content
        results[text] = (pieces, back)

    summary = []
    for text, (pieces, back) in results.items():
        summary.append([repr(text), len(text), len(text.encode("utf-8")), len(pieces),
                        len(text) / len(pieces), [piece_text(p) for p in pieces], repr(back), back == text])
    n_chars = sum(r[1] for r in summary)
    n_tokens = sum(r[3] for r in summary)
    ids = {t: [p.id for p in results[t][0]] for t in TEXTS}
    eq = {t: _pieces_with(results, t, b"=") for t in ("a==b", "a == b")}
    fib = next(t for t in TEXTS if t.startswith("def "))
    ctx.table(
        "tokenization", "Text → tokens → text",
        [("text", ""), ("characters", ""), ("UTF-8 bytes", ""), ("tokens", ""), ("characters per token", ""),
         ("pieces", ""), ("detokenized", ""), ("round trip ok", "")],
        summary,
        notes=[
            f"{sum(r[7] for r in summary)} of {len(summary)} texts came back unchanged from /detokenize.",
            leading_space_note(ids),
            f"'a==b' took {len(ids['a==b'])} tokens and 'a == b' took {len(ids['a == b'])}; their '=' pieces are "
            f"{', '.join(eq['a==b'][0]) or 'none'} and {', '.join(eq['a == b'][0]) or 'none'}, "
            f"{'with no id in common' if not set(eq['a==b'][1]) & set(eq['a == b'][1]) else 'sharing some ids'}.",
            whitespace_note(results[fib][0]),
            f"'3.14159' took {len(ids['3.14159'])} tokens and '2026' took {len(ids['2026'])}.",
            f"Over all {len(summary)} texts: {n_chars} characters in {n_tokens} tokens, "
            f"{n_chars / n_tokens:.2f} characters per token.",
        ],
    )

    # 2. Every token: id, piece and its bytes.
    token_rows = []
    for text, (pieces, _) in results.items():
        for i, p in enumerate(pieces):
            token_rows.append([repr(text), i, p.id, piece_text(p), piece_hex(p), isinstance(p.piece, list)])
    emoji = TEXTS[-1]
    emoji_pieces = results[emoji][0]
    joined = b"".join(p.piece_bytes for p in emoji_pieces)
    as_bytes = sum(isinstance(p.piece, list) for p in emoji_pieces)
    ctx.table(
        "tokens", "Every token: id, piece and bytes",
        [("text", ""), ("position", ""), ("id", ""), ("piece", ""), ("piece bytes", "hex"), ("piece sent as bytes", "")],
        token_rows,
        notes=[
            f"{emoji!r} is {len(emoji.encode('utf-8'))} UTF-8 bytes in {len(emoji_pieces)} token(s); "
            f"{as_bytes} piece(s) are not valid UTF-8 on their own and arrive as byte lists; joined they "
            f"{'are' if joined == emoji.encode('utf-8') else 'are NOT'} the character's bytes.",
            f"Largest id seen: {max(r[2] for r in token_rows)}.",
        ] + [
            f"{t!r}: {len(t)} characters, {len(t.encode('utf-8'))} UTF-8 bytes, {len(results[t][0])} token(s): "
            f"{', '.join(piece_text(p) for p in results[t][0])}."
            for t in ("café", "Zürich")
        ],
    )

    # 3. Vocabulary size: the server, and the file where it is readable here.
    facts = ctx.host("model_info", lambda: readable_model_facts(ctx))
    props = ctx.server.props().model_dump(mode="json")
    models = ctx.server.models().model_dump(mode="json")
    meta = (models.get("data") or [{}])[0].get("meta") or {}
    embd = facts["token_embd"] if facts else None
    out = facts["output"] if facts else None
    vocab_rows = []
    if facts:
        vocab_rows += [
            ["GGUF: tokenizer.ggml.tokens (entries)", facts["tokens_in_vocabulary"]],
            ["GGUF: token_embd rows", embd["shape"][1] if embd else None],
            ["GGUF: output rows (one score per entry)", out["shape"][1] if out else None],
        ]
    vocab_rows += [
        ["server: /v1/models meta n_vocab", meta.get("n_vocab")],
        ["server: /props n_vocab", find_key(props, "n_vocab")],
    ]
    reported = [r[1] for r in vocab_rows if isinstance(r[1], int)]
    hp = facts["hyperparameters"] if facts else {}
    n_vocab = hp.get("n_vocab") if isinstance(hp.get("n_vocab"), int) else meta.get("n_vocab")
    largest_id = max(r[2] for r in token_rows)
    vocab_notes = [vocabulary_note(reported)]
    if isinstance(n_vocab, int):
        vocab_notes.append(f"Every id in this lesson is below {n_vocab:,}: {'yes' if largest_id < n_vocab else 'no'} "
                           f"(largest {largest_id:,}).")
    if find_key(props, "n_vocab") is None:
        vocab_notes.append("/props does not report n_vocab in this build.")
    if facts is None:
        vocab_notes.append(f"The model file is not readable here ({_skipped_reason(ctx)}), so the file's vocabulary "
                           "is not listed; pass --model PATH.gguf, the file the server runs, to add it.")
    elif embd and out is None:
        vocab_notes.append("The file has no output.weight: the logits reuse token_embd's rows (tied embeddings).")
    ctx.table("vocabulary", "Vocabulary size", [("source", ""), ("entries", "")], vocab_rows, notes=vocab_notes)

    # 4. An id selects one row of token_embd.
    if facts is None or embd is None or len(embd["shape"]) != 2:
        why = (f"the model file is not readable here ({_skipped_reason(ctx)})" if facts is None
               else "the file has no 2-D token_embd.weight")
        ctx.note(f"The embedding rows are skipped: {why}.")
        return ctx.finish()
    ctx.step("reading embedding rows from the GGUF")
    chosen = []
    for text in EMBEDDING_TEXTS:
        pieces = results[text][0]
        chosen.append((text, pieces[0], len(pieces)))  # a one-token text, else its first token
    rows_by_id = ctx.host("embedding_rows", lambda: {
        str(p.id): embedding_row(ctx.require_model(), p.id) for _, p, _ in chosen})
    width = hp.get("n_embd") if isinstance(hp.get("n_embd"), int) else embd["shape"][0]
    emb_rows = []
    for text, p, n in chosen:
        row = rows_by_id[str(p.id)]
        emb_rows.append([repr(text), p.id, piece_text(p), len(row), width, len(row) == width,
                         row[:SHOW_NUMBERS], l2_norm(row), l2_norm(row[:SHOW_NUMBERS])])
    a, b = (rows_by_id[str(p.id)] for _, p, _ in chosen)
    cos = cosine(a, b)
    n_rows = embd["shape"][1]
    row_bytes = embd["n_bytes"] // n_rows
    same = chosen[0][1].id == chosen[1][1].id
    notes = [
        f"token_embd is {n_rows:,} rows of {embd['shape'][0]:,} numbers stored as {embd['type']}; "
        f"looking up one id reads one {row_bytes:,}-byte row.",
        f"Both rows have {width:,} numbers, the model width: "
        f"{'yes' if all(r[5] for r in emb_rows) else 'no'}.",
        (f"Both texts start with id {chosen[0][1].id}: the same row." if same else
         f"Ids {chosen[0][1].id} and {chosen[1][1].id} select rows whose cosine similarity is {cos:.4f} "
         f"(1 = same direction, 0 = unrelated)."),
    ] + [f"{t!r} is {n} tokens; the row shown is its first token's." for t, _, n in chosen if n > 1]
    if is_synthetic_metadata({"general.name": facts.get("name"), "general.description": facts.get("description")}):
        notes.append(f"The file describes itself as {facts['description']!r}: its rows carry no meaning, only shape.")
    ctx.table(
        "embedding_rows", "One id, one row of token_embd",
        [("text", ""), ("id", ""), ("piece", ""), ("row length", ""), ("model width", ""), ("length = width", ""),
         (f"first {SHOW_NUMBERS} numbers", ""), ("L2 norm of the row", ""), (f"L2 norm of the first {SHOW_NUMBERS}", "")],
        emb_rows,
        notes=notes,
    )
    return ctx.finish()


def _skipped_reason(ctx: LessonContext) -> str:
    """Why the model file is not read: where the server runs and whether a file was named."""
    facts = ctx.server_facts()
    if not facts["local"]:
        return f"the server runs on {facts['url_host']}"
    return "the server did not name a file that this host can read"


def _pieces_with(results: dict, text: str, part: bytes) -> tuple[list[str], list[int]]:
    """Pieces (shown) and ids of the tokens of `text` whose bytes contain `part`."""
    hits = [p for p in results[text][0] if part in p.piece_bytes]
    return [piece_text(p) for p in hits], [p.id for p in hits]


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
