"""Lesson 2 — Tokens and embeddings

A model never sees characters: the tokenizer cuts text into pieces from a fixed vocabulary and
hands the model their ids. This script sends short texts through the server's /tokenize (with
pieces) and back through /detokenize, so the pieces show how spacing, code, numbers and non-ASCII
text are cut (a space belongs to the token after it; bytes of a character can land in separate
tokens). It reads the vocabulary size from the server and, where the model file is readable
here, from the file, then follows one id into the model: the id selects one row of the token_embd
matrix, a vector as wide as the model, read straight from the GGUF file. Against a remote server
without --model only the server's side is shown.

Its parts: `main` below, in the order of the lesson; the requests (the server's tokenizer, its /props and /v1/models,
reads of the model file); the arithmetic (this file's computation section); the view, its records, tables and notes
(`bytesup.store.views.lesson02`). It has no plan of its own: every run asks the same.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

from pathlib import Path
from typing import Any

from bytesup.lesson import LessonContext
from bytesup.llama.responses import ModelList, Props, Tokenized, TokenPiece
from bytesup.models.gguf import embedding_row, read_model_info
from bytesup.store.views import lesson02
from bytesup.store.views.lesson02 import EmbeddingRow, ServedVocabulary, TextTokens, TokenCounts, VocabularySource

TITLE = "Tokens and embeddings"
# Nothing here is timed on a server (it asks the server to tokenize, and times nothing there):
# a run reads the machine's pace (bytesup.run.pace) around the other lessons alone.
TIMES_THE_SERVER = False

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


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"with_pieces": True, "add_special": False})

    # 1. Text -> ids and pieces -> text.
    ctx.step("tokenizing and detokenizing the lesson's texts")
    texts = tokenize_texts(ctx, TEXTS)
    counts = token_counts(texts)
    ctx.tables.append(lesson02.tokenization(texts, counts))
    ctx.plots.append(lesson02.tokens_plot(texts, counts))

    # 2. Every token: id, piece and its bytes.
    ctx.tables.append(lesson02.tokens(texts, counts))

    # 3. Vocabulary size: the server, and the file where it is readable here.
    facts = model_file_facts(ctx)
    served = served_vocabulary(*server_answers(ctx))
    not_read = skipped_reason(ctx) if facts is None else None
    ctx.tables.append(lesson02.vocabulary(vocabulary_sources(facts, served), model_n_vocab(facts, served), facts, served,
                                          counts, not_read))

    # 4. An id selects one row of token_embd: the first token of each of EMBEDDING_TEXTS.
    embd = facts["token_embd"] if facts else None
    if facts is None or embd is None or len(embd["shape"]) != 2:
        why = f"the model file is not readable here ({not_read})" if facts is None else "the file has no 2-D token_embd.weight"
        ctx.note(f"The embedding rows are skipped: {why}.")
        ctx.shows(lesson02.shows(texts, counts, None), plot="tokens_per_text")
        return ctx.finish()
    ctx.step("reading embedding rows from the GGUF")
    chosen = [next(t for t in texts if t.text == text) for text in EMBEDDING_TEXTS]
    rows_by_id = read_embedding_rows(ctx, [t.pieces[0].id for t in chosen])
    looked_up = embedding_rows(chosen, rows_by_id, model_width(facts))
    ctx.tables += lesson02.embedding_rows(facts, looked_up)

    # What this run shows: the tokens, the leading space, the two rows, first on the page.
    ctx.shows(lesson02.shows(texts, counts, looked_up), plot="tokens_per_text")
    return ctx.finish()


# --- requests: the server's tokenizer, and reads of the model file -----------------------------

def tokenize_texts(ctx: LessonContext, texts: list[str]) -> list[TextTokens]:
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


# --- computation: tokens, the vocabulary and embedding rows --------------------------------------

def pieces_of(tok: Tokenized) -> list[TokenPiece]:
    pieces = [t for t in tok.tokens if isinstance(t, TokenPiece)]
    if len(pieces) != len(tok.tokens):
        raise ValueError("the server returned ids without pieces; this lesson asks /tokenize for with_pieces")
    return pieces


def token_counts(texts: list[TextTokens]) -> TokenCounts:
    return TokenCounts(texts=len(texts), round_trips=sum(t.round_trip_ok for t in texts),
                       characters=sum(t.characters for t in texts), tokens=sum(t.n_tokens for t in texts),
                       largest_id=max(i for t in texts for i in t.ids))


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


def served_vocabulary(props: Props, models: ModelList) -> ServedVocabulary:
    data = models.model_dump(mode="json").get("data") or [{}]
    meta = data[0].get("meta") or {}
    return ServedVocabulary(models_n_vocab=meta.get("n_vocab"), props_n_vocab=find_key(props.model_dump(mode="json"), "n_vocab"))


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


def model_n_vocab(facts: dict | None, served: ServedVocabulary) -> int | None:
    """The vocabulary size: the file's hyperparameter, else the server's /v1/models meta."""
    hp = facts["hyperparameters"] if facts else {}
    n_vocab = hp.get("n_vocab") if isinstance(hp.get("n_vocab"), int) else served.models_n_vocab
    return n_vocab if isinstance(n_vocab, int) else None


def embedding_rows(chosen: list[TextTokens], rows_by_id: dict[str, list[float]], width: int) -> list[EmbeddingRow]:
    return [EmbeddingRow(text=t.text, token=t.pieces[0], n_tokens=t.n_tokens, row=rows_by_id[str(t.pieces[0].id)], width=width)
            for t in chosen]


def model_width(facts: dict) -> int:
    """n_embd from the file's hyperparameters, else token_embd's row length."""
    n_embd = facts["hyperparameters"].get("n_embd")
    return n_embd if isinstance(n_embd, int) else facts["token_embd"]["shape"][0]


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
