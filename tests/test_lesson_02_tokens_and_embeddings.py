"""Lesson 2: its arithmetic against hand-worked numbers, its main run on hand-made server answers and
file reads, and its recorded run replayed byte for byte with the tokenization and embedding arithmetic rechecked."""

from __future__ import annotations

import ast
import math

import pytest
from lessonkit import QueuedServer, hand_context

from bytesup.models.gguf import embedding_row
from bytesup.models.catalog import build_model, get_preset
from bytesup.llama.responses import ModelList, Props, TokenPiece
from bytesup.store.views import lesson02

LESSON = "02_tokens_and_embeddings"


def table(result, name):
    t = result.table(name)
    cols = [c.name for c in t.columns]
    return [dict(zip(cols, row, strict=True)) for row in t.rows]


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
        first = r[f"first {lesson02.SHOW_NUMBERS} numbers"]
        assert first == full[: lesson02.SHOW_NUMBERS]
        assert r["L2 norm of the row"] == pytest.approx(math.sqrt(sum(v * v for v in full)))
        assert r[f"L2 norm of the first {lesson02.SHOW_NUMBERS}"] == pytest.approx(math.sqrt(sum(v * v for v in first)))
        assert r["L2 norm of the row"] >= r[f"L2 norm of the first {lesson02.SHOW_NUMBERS}"]
        # The id shown is the text's own (first) token.
        assert r["id"] == tokens_of(result, ast.literal_eval(r["text"]))[0]["id"]
    assert rows[0]["id"] != rows[1]["id"]


def test_pure_helpers(lesson):
    assert lesson02.piece_text(TokenPiece(id=1, piece=" Paris")) == "' Paris'"
    assert lesson02.piece_text(TokenPiece(id=2, piece=[240])) == "b'\\xf0'"
    assert lesson02.piece_hex(TokenPiece(id=3, piece="é")) == "c3 a9"
    assert lesson.find_key({"a": [{"b": 1}, {"n_vocab": 7}]}, "n_vocab") == 7
    assert lesson.find_key({"a": 1}, "n_vocab") is None


# --- arithmetic by hand --------------------------------------------------------------------------

def test_norm_and_cosine_by_hand(lesson):
    assert lesson02.l2_norm([3.0, 4.0]) == 5.0            # √(9 + 16)
    assert lesson02.l2_norm([1.0, 2.0, 2.0]) == 3.0       # √(1 + 4 + 4)
    # [1, 2, 2] · [2, 1, 2] = 2 + 2 + 4 = 8; both norms 3: cosine 8/9
    assert lesson02.cosine([1.0, 2.0, 2.0], [2.0, 1.0, 2.0]) == pytest.approx(8 / 9, rel=1e-15)
    # [1, 0] · [−3, 4] = −3; norms 1 and 5: cosine −0.6
    assert lesson02.cosine([1.0, 0.0], [-3.0, 4.0]) == pytest.approx(-0.6, rel=1e-15)
    assert lesson02.cosine([1.0, 0.0], [0.0, 2.0]) == 0.0
    assert lesson02.cosine([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)


def test_text_tokens_counts_by_hand(lesson):
    # 'café' is 4 characters, 5 UTF-8 bytes (é is c3 a9), cut here into 'caf' + 'é': 2 tokens, 2 characters each
    cafe = lesson02.TextTokens(text="café", pieces=[TokenPiece(id=7, piece="caf"), TokenPiece(id=9, piece="é")], detokenized="café")
    assert (cafe.characters, cafe.utf8_bytes, cafe.n_tokens, cafe.characters_per_token) == (4, 5, 2, 2.0)
    assert cafe.ids == [7, 9] and cafe.round_trip_ok and cafe.pieces_rejoin and cafe.pieces_as_bytes == 0
    # '🦙' is 1 character, 4 bytes f0 9f a6 99, in two byte-list pieces: 0.5 characters per token
    llama = lesson02.TextTokens(text="🦙", pieces=[TokenPiece(id=1, piece=[0xF0, 0x9F]), TokenPiece(id=2, piece=[0xA6, 0x99])],
                              detokenized="?")
    assert (llama.characters, llama.utf8_bytes, llama.n_tokens, llama.characters_per_token) == (1, 4, 2, 0.5)
    assert llama.pieces_as_bytes == 2 and llama.pieces_rejoin and not llama.round_trip_ok
    cut = lesson02.TextTokens(text="🦙", pieces=[TokenPiece(id=1, piece=[0xF0, 0x9F])], detokenized="🦙")
    assert not cut.pieces_rejoin
    # together: 5 characters in 4 tokens, 1 of 2 round trips, largest id 9
    counts = lesson.token_counts([cafe, llama])
    assert (counts.texts, counts.round_trips, counts.characters, counts.tokens, counts.largest_id) == (2, 1, 5, 4, 9)
    assert counts.characters_per_token == 1.25


def test_what_the_run_shows_reads_the_recorded_counts_and_rows(result):
    texts = table(result, "tokenization")
    rows = table(result, "embedding_rows")
    chars, toks = sum(r["characters"] for r in texts), sum(r["tokens"] for r in texts)
    ids = {r["text"]: r["id"] for r in rows}
    rows_read = [result.host_values["embedding_rows"][str(r["id"])] for r in rows]
    text = result.shows.text
    assert f"cut {len(texts)} texts, {chars} characters, into {toks} tokens ({chars / toks:.2f} characters per token)" in text
    assert all(r["round trip ok"] for r in texts) and "into text, every one unchanged." in text
    assert f"'Paris' is id {ids[repr('Paris')]} and ' Paris' is id {ids[repr(' Paris')]}: the leading space is part" in text
    assert f"the two rows' cosine similarity is {lesson02.cosine(*rows_read):.4f}" in text
    assert not result.table("embedding_rows_main").detail and result.table("embedding_rows").detail
    # its plot: each text's characters and tokens from the table, beside the line of characters ÷ (characters per token)
    line, each = result.plots[0].series
    assert result.shows.plot == result.plots[0].name == "tokens_per_text"
    assert each.x == [r["characters"] for r in texts] and each.y == [r["tokens"] for r in texts]
    top = max(r["characters"] for r in texts)
    assert line.x == [0, top] and line.y == pytest.approx([0, top * toks / chars])
    assert len(result.table("embedding_rows_main").columns) == 6 < len(result.table("embedding_rows").columns)


def test_what_the_run_shows_follows_hand_made_tokens():
    def text(t, ids, back=None):
        return lesson02.TextTokens(text=t, pieces=[TokenPiece(id=i, piece=t) for i in ids], detokenized=t if back is None else back)

    # ' Paris' and 'Paris' one id each, different: 11 characters in 2 tokens, 5.50 per token, both back
    apart = [text("Paris", [5]), text(" Paris", [6])]
    counts = lesson02.TokenCounts(texts=2, round_trips=2, characters=11, tokens=2, largest_id=6)
    said = lesson02.shows(apart, counts, None)
    assert said == ("The server cut 2 texts, 11 characters, into 2 tokens (5.50 characters per token); /detokenize turned "
                    "the ids back into text, every one unchanged. 'Paris' is id 5 and ' Paris' is id 6: the leading "
                    "space is part of the token.")
    # the same id for both, one text not back: the sentence says so
    same = [text("Paris", [5]), text(" Paris", [5], back="Paris")]
    said = lesson02.shows(same, lesson02.TokenCounts(texts=2, round_trips=1, characters=11, tokens=2, largest_id=5), None)
    assert "only 1 of 2 unchanged" in said and "the same id, so here the leading space has no part in the token." in said
    # rows (1, 0) and (0, 1): cosine 0; the same id: the same row
    rows = [lesson02.EmbeddingRow(text=t.text, token=t.pieces[0], n_tokens=1, row=row, width=2)
            for t, row in zip(apart, ([1.0, 0.0], [0.0, 1.0]), strict=True)]
    assert lesson02.shows(apart, counts, rows).endswith(
        " Each id selects one row of 2 numbers in token_embd; the two rows' cosine similarity is 0.0000 (1 would be the same direction).")
    one = [lesson02.EmbeddingRow(text=t.text, token=t.pieces[0], n_tokens=1, row=[1.0, 0.0], width=2) for t in same]
    assert lesson02.shows(same, counts, one).endswith("both select the same row.")


def test_pieces_of_refuses_bare_ids(lesson):
    from bytesup.llama.responses import Tokenized

    assert [p.id for p in lesson.pieces_of(Tokenized(tokens=[{"id": 5, "piece": "x"}]))] == [5]
    with pytest.raises(ValueError, match=r"^the server returned ids without pieces; this lesson asks /tokenize for with_pieces$"):
        lesson.pieces_of(Tokenized(tokens=[5, 6]))


def test_vocabulary_sources_and_size(lesson):
    served = lesson.served_vocabulary(Props(default_generation_settings={"n_vocab": 70}),
                                      ModelList(data=[{"id": "m", "meta": {"n_vocab": 64}}]))
    assert (served.models_n_vocab, served.props_n_vocab) == (64, 70)
    facts = {"tokens_in_vocabulary": 64, "token_embd": {"shape": [9, 64]}, "output": {"shape": [9, 65]},
             "hyperparameters": {"n_vocab": 66}}
    sources = lesson.vocabulary_sources(facts, served)
    # a GGUF shape is [row length, rows]: 64 rows of token_embd, 65 of output
    assert [(s.source.split(":")[0], s.entries) for s in sources] == [("GGUF", 64), ("GGUF", 64), ("GGUF", 65),
                                                                      ("server", 64), ("server", 70)]
    assert lesson02.reported_sizes(sources) == [64, 64, 65, 64, 70]
    assert lesson.model_n_vocab(facts, served) == 66  # the file's hyperparameter first
    assert lesson.model_n_vocab(None, served) == 64   # else the server's /v1/models meta
    none = lesson.served_vocabulary(Props(), ModelList())
    assert (none.models_n_vocab, none.props_n_vocab) == (None, None)
    assert [s.entries for s in lesson.vocabulary_sources(None, none)] == [None, None]
    assert lesson.model_n_vocab(None, none) is None


def test_row_bytes_and_width_by_hand(lesson):
    # SmolLM2's token_embd: 49,152 rows of 576 numbers in Q8_0, 18 blocks of 32 numbers × 34 bytes = 612 bytes a row
    embd = {"shape": [576, 49152], "n_bytes": 30081024}
    assert lesson02.row_bytes(embd) == 612
    assert lesson.model_width({"hyperparameters": {"n_embd": 576}, "token_embd": embd}) == 576
    assert lesson.model_width({"hyperparameters": {}, "token_embd": {"shape": [12, 100]}}) == 12
    # The file's n_embd wins over the row length when both are there (and disagree).
    assert lesson.model_width({"hyperparameters": {"n_embd": 64}, "token_embd": {"shape": [12, 100]}}) == 64


def test_embedding_rows_take_the_first_token(lesson):
    text = lesson02.TextTokens(text="ab", pieces=[TokenPiece(id=3, piece="a"), TokenPiece(id=4, piece="b")], detokenized="ab")
    row = list(range(10))
    (got,) = lesson.embedding_rows([text], {"3": [float(v) for v in row], "4": [0.0] * 10}, width=10)
    assert got.token.id == 3 and got.n_tokens == 2 and got.length_is_width
    assert got.first == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # SHOW_NUMBERS = 8
    assert not lesson.embedding_rows([text], {"3": [1.0] * 9}, width=10)[0].length_is_width


# --- main on hand-made answers ---------------------------------------------------------------------

HAND_PIECES = {
    "Paris": [(10, "Paris")],
    " Paris": [(11, " Paris")],
    "The capital of France is Paris": [(1, "The"), (2, " capital"), (3, " of"), (4, " France"), (5, " is"), (11, " Paris")],
    "a==b": [(20, "a"), (21, "=="), (22, "b")],
    "a == b": [(20, "a"), (23, " =="), (24, " b")],
    "def fibonacci(n):\n    if n == 0:": [(30, "def"), (31, " fibonacci"), (32, "(n):"), (33, "\n"), (34, "   "), (35, " if"),
                                          (36, " n"), (23, " =="), (37, " 0:")],
    "3.14159": [(40, "3"), (41, ".14"), (42, "159")],
    "2026": [(43, "2026")],
    "café": [(50, "caf"), (51, "é")],
    "Zürich": [(52, "Zürich")],
    "🦙": [(60, [0xF0, 0x9F]), (61, [0xA6, 0x99])],
}
BYTES_OF = {i: bytes(p) if isinstance(p, list) else p.encode("utf-8") for pieces in HAND_PIECES.values() for i, p in pieces}
ROW_SPACED = [1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0]  # norm √(1 + 4 + 4 + 16) = 5; first 8: 3
ROW_PLAIN = [2.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]   # norm 3; dot with the other: 2 + 2 + 4 = 8
HAND_FACTS = {"name": "hand", "description": None, "hyperparameters": {"n_embd": 9, "n_vocab": 64}, "tokens_in_vocabulary": 64,
              "token_embd": {"name": "token_embd.weight", "shape": [9, 64], "type": "F32", "n_bytes": 64 * 9 * 4}, "output": None}


def tokenize(body):
    assert body["with_pieces"] is True and body["add_special"] is False
    return {"tokens": [{"id": i, "piece": p} for i, p in HAND_PIECES[body["content"]]]}


def detokenize(body):
    text = b"".join(BYTES_OF[i] for i in body["tokens"]).decode("utf-8")
    return {"content": "Zurich" if text == "Zürich" else text}  # one text does not come back


def hand_server(props_n_vocab=70):
    n = len(HAND_PIECES)
    return QueuedServer({"/tokenize": [tokenize] * n, "/detokenize": [detokenize] * n,
                         "/props": [{"build_info": "b1", "default_generation_settings": {"n_vocab": props_n_vocab}}],
                         "/v1/models": [{"data": [{"id": "hand.gguf", "meta": {"n_vocab": 64}}]}]})


@pytest.fixture(scope="module")
def hand_run(lesson):
    server = hand_server()
    values = {"model_info": HAND_FACTS, "embedding_rows": {"11": ROW_SPACED, "10": ROW_PLAIN}}
    result = lesson.main(hand_context(LESSON, server, host_values=values))
    assert server.left() == {}
    return result, server


def test_main_tokenization_table_by_hand(hand_run, lesson):
    result, server = hand_run
    assert [b["content"] for _, path, b in server.requests if path == "/tokenize"] == lesson.TEXTS
    rows = {r["text"]: r for r in table(result, "tokenization")}
    code = rows[repr("def fibonacci(n):\n    if n == 0:")]
    assert (code["characters"], code["UTF-8 bytes"], code["tokens"]) == (32, 32, 9)
    assert code["characters per token"] == pytest.approx(32 / 9)
    emoji = rows[repr("🦙")]
    assert (emoji["characters"], emoji["UTF-8 bytes"], emoji["tokens"], emoji["characters per token"]) == (1, 4, 2, 0.5)
    assert rows[repr("café")]["UTF-8 bytes"] == 5 and rows[repr("café")]["characters per token"] == 2.0
    assert rows[repr("Zürich")]["round trip ok"] is False and rows[repr("Zürich")]["detokenized"] == "'Zurich'"
    notes = result.table("tokenization").notes
    assert notes[0] == "10 of 11 texts came back unchanged from /detokenize."
    assert notes[1] == "'Paris' is ids [10] and ' Paris' is ids [11]: different ids, so the leading space is part of the token."
    assert notes[2] == "'a==b' took 3 tokens and 'a == b' took 3; their '=' pieces are '==' and ' ==', with no id in common."
    assert notes[3] == "In the code line, whitespace-only pieces: '\\n', '   ': newline and indentation are tokens too."
    assert notes[4] == "'3.14159' took 3 tokens and '2026' took 1."
    # 5 + 6 + 30 + 4 + 6 + 32 + 7 + 4 + 4 + 6 + 1 = 105 characters; 1 + 1 + 6 + 3 + 3 + 9 + 3 + 1 + 2 + 1 + 2 = 32 tokens
    assert notes[5] == "Over all 11 texts: 105 characters in 32 tokens, 3.28 characters per token."


def test_main_tokens_table_by_hand(hand_run):
    result, _ = hand_run
    rows = table(result, "tokens")
    assert len(rows) == 32
    emoji = [r for r in rows if r["text"] == repr("🦙")]
    assert [(r["position"], r["id"], r["piece"], r["piece bytes"], r["piece sent as bytes"]) for r in emoji] == [
        (0, 60, "b'\\xf0\\x9f'", "f0 9f", True), (1, 61, "b'\\xa6\\x99'", "a6 99", True)]
    notes = result.table("tokens").notes
    assert notes[0] == ("'🦙' is 4 UTF-8 bytes in 2 token(s); 2 piece(s) are not valid UTF-8 on their own and arrive as byte "
                        "lists; joined they are the character's bytes.")
    assert notes[1] == "Largest id seen: 61."
    assert notes[2] == "'café': 4 characters, 5 UTF-8 bytes, 2 token(s): 'caf', 'é'."


def test_main_vocabulary_by_hand(hand_run):
    result, _ = hand_run
    assert [(r["source"], r["entries"]) for r in table(result, "vocabulary")] == [
        ("GGUF: tokenizer.ggml.tokens (entries)", 64), ("GGUF: token_embd rows", 64), ("GGUF: output rows (one score per entry)", None),
        ("server: /v1/models meta n_vocab", 64), ("server: /props n_vocab", 70)]
    assert result.table("vocabulary").notes == [
        "4 sources report a size; they disagree: 64, 70.",
        "Every id in this lesson is below 64: yes (largest 61).",
        "The file has no output.weight: the logits reuse token_embd's rows (tied embeddings)."]


def test_main_embedding_rows_by_hand(hand_run):
    result, _ = hand_run
    rows = table(result, "embedding_rows")
    assert [(r["text"], r["id"], r["row length"], r["model width"], r["length = width"]) for r in rows] == [
        ("' Paris'", 11, 9, 9, True), ("'Paris'", 10, 9, 9, True)]
    assert rows[0]["first 8 numbers"] == ROW_SPACED[:8]
    assert rows[0]["L2 norm of the row"] == 5.0 and rows[0]["L2 norm of the first 8"] == 3.0
    assert rows[1]["L2 norm of the row"] == 3.0 and rows[1]["L2 norm of the first 8"] == 3.0
    # 64 rows × 9 float32 numbers = 2,304 bytes: 36 bytes a row; cosine 8 / (5 · 3) = 0.5333
    assert result.table("embedding_rows_main").notes == [
        "token_embd is 64 rows of 9 numbers stored as F32; looking up one id reads one 36-byte row.",
        "Both rows have 9 numbers, the model width: yes.",
        "Ids 11 and 10 select rows whose cosine similarity is 0.5333 (1 = same direction, 0 = unrelated)."]
    main = table(result, "embedding_rows_main")
    assert [(r["id"], r["row length"], r["L2 norm of the row"]) for r in main] == [(11, 9, 5.0), (10, 9, 3.0)]
    assert result.shows.text.endswith("Each id selects one row of 9 numbers in token_embd; the two rows' cosine "
                                      "similarity is 0.5333 (1 would be the same direction).")


def test_main_without_the_model_file_asks_where_the_server_runs(lesson):
    server = hand_server()
    facts = {"url_host": "gpu-box", "local": False, "model_readable": False, "accelerators": [], "on_accelerator": False,
             "host_bandwidth_applies": False, "reason": "the server runs on gpu-box, not on this host"}
    result = lesson.main(hand_context(LESSON, server, host_values={"model_info": None, "server_facts": facts}))
    assert [t.name for t in result.tables] == ["tokenization", "tokens", "vocabulary"]
    assert [r[1] for r in result.table("vocabulary").rows] == [64, 70]
    # no file: the vocabulary size bounding the ids is the server's /v1/models one
    assert "Every id in this lesson is below 64: yes (largest 61)." in result.table("vocabulary").notes
    assert result.notes == ["The embedding rows are skipped: the model file is not readable here (the server runs on gpu-box)."]


def test_model_facts_on_a_model_built_here(tmp_path, lesson):
    preset = get_preset("tiny-q8_0")
    path = build_model(preset, tmp_path / "m.gguf")
    facts = lesson.model_facts(path)
    assert facts["tokens_in_vocabulary"] == preset.n_vocab
    assert facts["token_embd"]["shape"] == [preset.n_embd, preset.n_vocab]
    assert len(embedding_row(path, preset.n_vocab - 1)) == facts["hyperparameters"]["n_embd"] == preset.n_embd


def test_notes_follow_the_data(lesson):
    assert "different ids, so the leading space is part of the token" in lesson02.leading_space_note({"Paris": [1], " Paris": [2]})
    same = lesson02.leading_space_note({"Paris": [1], " Paris": [1]})
    assert "part of the token" not in same and "no token of its own" in same
    ws = lesson02.whitespace_note([TokenPiece(id=1, piece="x"), TokenPiece(id=2, piece="\n"), TokenPiece(id=3, piece="   ")])
    assert "'\\n', '   '" in ws and "tokens too" in ws
    inside = lesson02.whitespace_note([TokenPiece(id=1, piece=":\n"), TokenPiece(id=2, piece="    if")])
    assert "tokens too" not in inside and "':\\n', '    if'" in inside
    assert "no piece holds" in lesson02.whitespace_note([TokenPiece(id=1, piece="x")])
    assert lesson02.vocabulary_note([]) == "No source reports a vocabulary size."
    assert lesson02.vocabulary_note([5]) == "One source reports a size: 5."
    assert "all agree" in lesson02.vocabulary_note([5, 5]) and "disagree: 5, 6" in lesson02.vocabulary_note([5, 6])


def _ctx(lesson, model_path):
    from bytesup.llama.client import LlamaServer
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    return LessonContext(LESSON, lesson.TITLE, server=LlamaServer("http://127.0.0.1:9"), run=RunOptions(),
                         model_path=model_path, sink=[], replay=None, progress=Reporter(None, LESSON))


def test_model_facts_are_optional_but_a_bad_file_fails(tmp_path, lesson):
    from bytesup.models.gguf import GGUFError

    assert lesson.readable_model_facts(_ctx(lesson, None)) is None
    assert lesson.readable_model_facts(_ctx(lesson, tmp_path / "missing.gguf")) is None
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model\n" * 10)
    with pytest.raises(GGUFError, match="bad.gguf"):
        lesson.readable_model_facts(_ctx(lesson, bad))


def test_a_remote_server_without_the_model_file_still_gets_its_tables(lesson):
    """The recorded exchanges replayed as if the server ran elsewhere and no GGUF were readable here."""
    from lessonkit import recorded

    from bytesup.llama.client import LlamaServer
    from bytesup.llama.recording import ReplayTransport
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions
    from bytesup.store.runs import load_replay

    source = load_replay(recorded(LESSON), LESSON)
    values = source.result.host_values
    values["model_info"] = None
    values.pop("embedding_rows", None)
    values["server_facts"] = {"url_host": "gpu-box", "local": False, "model_readable": False, "accelerators": [],
                              "on_accelerator": False, "host_bandwidth_applies": False,
                              "reason": "the server runs on gpu-box, not on this host"}
    server = LlamaServer("http://replay", transport=ReplayTransport(source.exchanges, "main", []))
    ctx = LessonContext(LESSON, lesson.TITLE, server=server, run=RunOptions(), model_path=None, sink=[],
                        replay=source, progress=Reporter(None, LESSON))
    ctx.identity = values["identity"]
    result = lesson.main(ctx)
    server.close()
    assert [t.name for t in result.tables] == ["tokenization", "tokens", "vocabulary"]
    vocab = result.table("vocabulary")
    assert all(r[0].startswith("server:") for r in vocab.rows)
    assert any("gpu-box" in n and "--model" in n for n in vocab.notes)
    assert any(n.startswith("The embedding rows are skipped") and "gpu-box" in n for n in result.notes)
