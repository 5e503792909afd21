"""Lesson 2 replayed from its recorded run, with its tokenization and embedding arithmetic rechecked."""

from __future__ import annotations

import ast
import math

import pytest

from bytesup.gguf_read import embedding_row
from bytesup.models import build_model, get_preset
from bytesup.records import TokenPiece

LESSON = "02_tokens_and_embeddings"


def table(result, name):
    t = result.table(name)
    cols = [c.name for c in t.columns]
    return [dict(zip(cols, row)) for row in t.rows]


def tokens_of(result, text):
    return [r for r in table(result, "tokens") if r["text"] == repr(text)]


def test_every_text_round_trips(result, lesson):
    rows = table(result, "tokenization")
    assert [r["text"] for r in rows] == [repr(t) for t in lesson.TEXTS]
    for r in rows:
        assert r["round trip ok"] is True, r["text"]
        assert r["detokenized"] == r["text"]


def test_ids_and_pieces_are_counted_alike(result):
    for r in table(result, "tokenization"):
        toks = tokens_of(result, ast.literal_eval(r["text"]))  # the text column is repr(text)
        assert r["tokens"] == len(r["pieces"]) == len(toks), r["text"]
        assert [t["position"] for t in toks] == list(range(len(toks)))
        assert [t["piece"] for t in toks] == r["pieces"]
        assert r["characters per token"] == pytest.approx(r["characters"] / r["tokens"])
        # The pieces' bytes rebuild the text.
        assert b"".join(bytes.fromhex(t["piece bytes"]) for t in toks) == ast.literal_eval(r["text"]).encode("utf-8")


def test_a_leading_space_makes_another_token(result):
    assert [t["id"] for t in tokens_of(result, " Paris")] != [t["id"] for t in tokens_of(result, "Paris")]


def test_the_emoji_arrives_as_byte_lists_that_rebuild_it(result):
    toks = tokens_of(result, "🦙")
    as_bytes = [t for t in toks if t["piece sent as bytes"]]
    assert as_bytes, "the recorded emoji had no byte-list pieces"
    for t in as_bytes:
        assert t["piece"].startswith("b'")
    assert b"".join(bytes.fromhex(t["piece bytes"]) for t in toks) == "🦙".encode("utf-8")


def test_vocabulary_sources_agree(result):
    rows = table(result, "vocabulary")
    sizes = {r["entries"] for r in rows if r["entries"] is not None}
    assert len(sizes) == 1
    assert result.host_values["model_info"]["hyperparameters"]["n_vocab"] in sizes
    assert max(r["id"] for r in table(result, "tokens")) < sizes.pop()


def test_embedding_rows_have_the_model_width(result, lesson):
    width = result.host_values["model_info"]["hyperparameters"]["n_embd"]
    rows = table(result, "embedding_rows")
    assert [r["text"] for r in rows] == [repr(t) for t in lesson.EMBEDDING_TEXTS]
    for r in rows:
        full = result.host_values["embedding_rows"][str(r["id"])]
        assert r["row length"] == len(full) == r["model width"] == width
        first = r[f"first {lesson.SHOW_NUMBERS} numbers"]
        assert first == full[: lesson.SHOW_NUMBERS]
        assert r["L2 norm of the row"] == pytest.approx(math.sqrt(sum(v * v for v in full)))
        assert r[f"L2 norm of the first {lesson.SHOW_NUMBERS}"] == pytest.approx(math.sqrt(sum(v * v for v in first)))
        assert r["L2 norm of the row"] >= r[f"L2 norm of the first {lesson.SHOW_NUMBERS}"]
        # The id shown is the text's own (first) token.
        assert r["id"] == tokens_of(result, ast.literal_eval(r["text"]))[0]["id"]
    assert rows[0]["id"] != rows[1]["id"]


def test_pure_helpers(lesson):
    assert lesson.piece_text(TokenPiece(id=1, piece=" Paris")) == "' Paris'"
    assert lesson.piece_text(TokenPiece(id=2, piece=[240])) == "b'\\xf0'"
    assert lesson.piece_hex(TokenPiece(id=3, piece="é")) == "c3 a9"
    assert lesson.l2_norm([3.0, 4.0]) == 5.0
    assert lesson.cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert lesson.cosine([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)
    assert lesson.find_key({"a": [{"b": 1}, {"n_vocab": 7}]}, "n_vocab") == 7
    assert lesson.find_key({"a": 1}, "n_vocab") is None


def test_model_facts_on_a_model_built_here(tmp_path, lesson):
    preset = get_preset("tiny-q8_0")
    path = build_model(preset, tmp_path / "m.gguf")
    facts = lesson.model_facts(path)
    assert facts["tokens_in_vocabulary"] == preset.n_vocab
    assert facts["token_embd"]["shape"] == [preset.n_embd, preset.n_vocab]
    assert len(embedding_row(path, preset.n_vocab - 1)) == facts["hyperparameters"]["n_embd"] == preset.n_embd


def test_notes_follow_the_data(lesson):
    assert "different ids, so the leading space is part of the token" in lesson.leading_space_note({"Paris": [1], " Paris": [2]})
    same = lesson.leading_space_note({"Paris": [1], " Paris": [1]})
    assert "part of the token" not in same and "no token of its own" in same
    ws = lesson.whitespace_note([TokenPiece(id=1, piece="x"), TokenPiece(id=2, piece="\n"), TokenPiece(id=3, piece="   ")])
    assert "'\\n', '   '" in ws and "tokens too" in ws
    inside = lesson.whitespace_note([TokenPiece(id=1, piece=":\n"), TokenPiece(id=2, piece="    if")])
    assert "tokens too" not in inside and "':\\n', '    if'" in inside
    assert "no piece holds" in lesson.whitespace_note([TokenPiece(id=1, piece="x")])
    assert lesson.vocabulary_note([]) == "No source reports a vocabulary size."
    assert lesson.vocabulary_note([5]) == "One source reports a size: 5."
    assert "all agree" in lesson.vocabulary_note([5, 5]) and "disagree: 5, 6" in lesson.vocabulary_note([5, 6])


def _ctx(lesson, model_path):
    from bytesup.client import LlamaServer
    from bytesup.runner import LessonContext, Reporter, RunOptions

    return LessonContext(LESSON, lesson.TITLE, server=LlamaServer("http://127.0.0.1:9"), options=RunOptions(),
                         model_path=model_path, sink=[], replay=None, progress=Reporter(None, LESSON))


def test_model_facts_are_optional_but_a_bad_file_fails(tmp_path, lesson):
    from bytesup.gguf_read import GGUFError

    assert lesson.readable_model_facts(_ctx(lesson, None)) is None
    assert lesson.readable_model_facts(_ctx(lesson, tmp_path / "missing.gguf")) is None
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model\n" * 10)
    with pytest.raises(GGUFError, match="bad.gguf"):
        lesson.readable_model_facts(_ctx(lesson, bad))


def test_a_remote_server_without_the_model_file_still_gets_its_tables(lesson):
    """The recorded exchanges replayed as if the server ran elsewhere and no GGUF were readable here."""
    from lessonkit import recorded

    from bytesup.client import LlamaServer
    from bytesup.replay import ReplayTransport
    from bytesup.runner import LessonContext, Reporter, RunOptions, load_replay

    source = load_replay(recorded(LESSON), LESSON)
    values = source.result.host_values
    values["model_info"] = None
    values.pop("embedding_rows", None)
    values["server_facts"] = {"url_host": "gpu-box", "local": False, "model_readable": False, "accelerators": [],
                              "on_accelerator": False, "host_bandwidth_applies": False,
                              "reason": "the server runs on gpu-box, not on this host"}
    server = LlamaServer("http://replay", transport=ReplayTransport(source.exchanges, "main", []))
    ctx = LessonContext(LESSON, lesson.TITLE, server=server, options=RunOptions(), model_path=None, sink=[],
                        replay=source, progress=Reporter(None, LESSON))
    ctx.identity = values["identity"]
    result = lesson.main(ctx)
    server.close()
    assert [t.name for t in result.tables] == ["tokenization", "tokens", "vocabulary"]
    vocab = result.table("vocabulary")
    assert all(r[0].startswith("server:") for r in vocab.rows)
    assert any("gpu-box" in n and "--model" in n for n in vocab.notes)
    assert any(n.startswith("The embedding rows are skipped") and "gpu-box" in n for n in result.notes)
