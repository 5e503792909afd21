"""The numpy forward pass (bytesup.models.forward) against hand arithmetic and a naive per-token reference."""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np
import pytest

from bytesup.models import forward
from bytesup.models.forward import ForwardError, Hyper


# --- RoPE ------------------------------------------------------------------------------------------

def test_rope_turns_adjacent_pairs_by_hand():
    # One head of width 4, base 10,000, all four dimensions turned. Pair 0 (x0, x1) turns by
    # position × 10,000^(−0/4) = 1 rad at position 1; pair 1 (x2, x3) by 10,000^(−2/4) = 0.01 rad.
    x = np.array([[[1.0, 0.0, 0.0, 1.0]]], dtype=np.float32)
    out = forward.rope(x, np.array([1]), 10000.0, 4)[0, 0]
    # (1, 0) turned by 1 rad is (cos 1, sin 1); (0, 1) turned by 0.01 rad is (−sin 0.01, cos 0.01).
    assert out.tolist() == pytest.approx([math.cos(1), math.sin(1), -math.sin(0.01), math.cos(0.01)], abs=1e-6)
    # At position 0 nothing turns; at position 3, pair 0 turns by 3 rad.
    assert forward.rope(x, np.array([0]), 10000.0, 4)[0, 0].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert forward.rope(x, np.array([3]), 10000.0, 4)[0, 0, :2].tolist() == pytest.approx([math.cos(3), math.sin(3)], abs=1e-6)


def test_rope_leaves_the_dimensions_past_n_rot_and_scales_positions_linearly():
    x = np.array([[[0.5, -1.0, 2.0, 3.0]]], dtype=np.float32)
    out = forward.rope(x, np.array([2]), 100.0, 2)[0, 0]
    # n_rot 2: only (x0, x1) turns, by 2 × 100^0 = 2 rad; x2 and x3 pass unchanged.
    assert out.tolist() == pytest.approx([0.5 * math.cos(2) + 1.0 * math.sin(2), 0.5 * math.sin(2) - 1.0 * math.cos(2), 2.0, 3.0],
                                         abs=1e-6)
    # A linear scale of 1/4 makes position 8 turn as far as position 2.
    assert forward.rope(x, np.array([8]), 100.0, 2, freq_scale=0.25)[0, 0].tolist() == pytest.approx(out.tolist(), abs=1e-6)


def rotate_half(x: np.ndarray, position: int, base: float) -> np.ndarray:
    """Hugging Face's layout: dimension i pairs with i + d/2 (wrong for GGUF weights)."""
    d = x.shape[-1]
    out = x.copy()
    for i in range(d // 2):
        theta = position * base ** (-2 * i / d)
        a, b = x[..., i], x[..., i + d // 2]
        out[..., i] = a * math.cos(theta) - b * math.sin(theta)
        out[..., i + d // 2] = a * math.sin(theta) + b * math.cos(theta)
    return out


def test_rope_is_not_rotate_half():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 8)).astype(np.float32)
    ours = forward.rope(x, np.array([5]), 10000.0, 8)
    theirs = rotate_half(x, 5, 10000.0)
    assert np.max(np.abs(ours - theirs)) > 0.1
    # Both keep each head's length: a rotation, just of other pairs.
    assert np.linalg.norm(ours, axis=-1) == pytest.approx(np.linalg.norm(x, axis=-1), rel=1e-5)


# --- RMSNorm, SwiGLU, softmax ------------------------------------------------------------------------

def test_rms_norm_against_a_scalar_loop():
    x = [3.0, -4.0, 0.0, 12.0]
    w = [1.0, 0.5, 2.0, -1.0]
    eps = 1e-5
    ms = 0.0
    for v in x:
        ms += v * v
    ms /= len(x)  # (9 + 16 + 0 + 144) / 4 = 42.25
    expected = [v / math.sqrt(ms + eps) * g for v, g in zip(x, w, strict=True)]
    got = forward.rms_norm(np.array([x], dtype=np.float32), np.array(w, dtype=np.float32), eps)
    assert got[0].tolist() == pytest.approx(expected, rel=1e-6)
    assert ms == 42.25 and got[0, 0] == pytest.approx(3.0 / 6.5, rel=1e-5)


def test_swiglu_against_scalar_loops():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3)
    gate, up, down = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal((3, 4))
    hidden = []
    for j in range(4):
        g = sum(gate[j, i] * x[i] for i in range(3))
        u = sum(up[j, i] * x[i] for i in range(3))
        hidden.append(g / (1 + math.exp(-g)) * u)
    expected = [sum(down[o, j] * hidden[j] for j in range(4)) for o in range(3)]
    assert forward.swiglu(x[None], gate, up, down)[0].tolist() == pytest.approx(expected, rel=1e-10)


def test_softmax_of_the_lessons_three_logits():
    p = forward.softmax(np.array([2.0, 1.0, 0.1]))
    total = math.exp(2.0) + math.exp(1.0) + math.exp(0.1)
    assert p.tolist() == pytest.approx([math.exp(2.0) / total, math.exp(1.0) / total, math.exp(0.1) / total], rel=1e-12)


# --- grouped-query attention -----------------------------------------------------------------------------

def _hyper(**kw) -> Hyper:
    base = dict(n_layer=1, n_embd=8, n_head=4, n_head_kv=2, head_dim=2, n_ff=4, n_vocab=4, rms_eps=1e-5,
                rope_base=10000.0, rope_dims=2, rope_freq_scale=1.0, tied_output=True)
    return Hyper(**{**base, **kw})


def test_gqa_query_head_h_reads_kv_head_h_over_the_group():
    hp = _hyper()
    zeros = np.zeros
    # The values: KV head 0 holds (1, 1), KV head 1 holds (2, 2), whatever the input; one position sees only itself.
    wv = zeros((4, 8), dtype=np.float32)
    x = np.ones((1, 8), dtype=np.float32) / 8
    wv[0:2, :] = 1.0
    wv[2:4, :] = 2.0
    w = forward.BlockWeights(attn_norm=np.ones(8, np.float32), attn_q=zeros((8, 8), np.float32), attn_k=zeros((4, 8), np.float32),
                             attn_v=wv, attn_output=np.eye(8, dtype=np.float32), ffn_norm=np.ones(8, np.float32),
                             ffn_gate=zeros((4, 8), np.float32), ffn_up=zeros((4, 8), np.float32), ffn_down=zeros((8, 4), np.float32))
    out = forward.attention(w, x, hp, np.array([0]))[0]
    # Query heads 0 and 1 share KV head 0, heads 2 and 3 KV head 1 (h // 2); h % 2 would give 1, 2, 1, 2.
    assert out.tolist() == pytest.approx([1, 1, 1, 1, 2, 2, 2, 2])
    assert hp.group == 2


# --- a two-block model written as a GGUF, against a naive reference --------------------------------------

TINY = dict(n_layer=2, n_embd=16, n_head=4, n_head_kv=2, head_dim=4, n_ff=24, n_vocab=32, rms_eps=1e-5, rope_base=500.0)


def write_tiny(path: Path, *, tied: bool = True, arch: str = "llama", extra: str | None = None,
               qtype: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.F32, seed: int = 0,
               more: dict | None = None, leave_out: str | None = None) -> dict[str, np.ndarray]:
    """A two-block llama GGUF with seeded random weights (`more`: extra metadata keys and values; `leave_out`:
    a tensor not written); returns the weights as written (float32)."""
    c = TINY
    rng = np.random.default_rng(seed)
    d, hd, ff = c["n_embd"], c["head_dim"], c["n_ff"]
    shapes = {"token_embd.weight": (c["n_vocab"], d), "output_norm.weight": (d,)}
    if not tied:
        shapes["output.weight"] = (c["n_vocab"], d)
    for b in range(c["n_layer"]):
        shapes |= {f"blk.{b}.attn_norm.weight": (d,), f"blk.{b}.attn_q.weight": (c["n_head"] * hd, d),
                   f"blk.{b}.attn_k.weight": (c["n_head_kv"] * hd, d), f"blk.{b}.attn_v.weight": (c["n_head_kv"] * hd, d),
                   f"blk.{b}.attn_output.weight": (d, c["n_head"] * hd), f"blk.{b}.ffn_norm.weight": (d,),
                   f"blk.{b}.ffn_gate.weight": (ff, d), f"blk.{b}.ffn_up.weight": (ff, d), f"blk.{b}.ffn_down.weight": (d, ff)}
    if extra:
        shapes[extra] = (d,)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(64)
    writer.add_embedding_length(d)
    writer.add_block_count(c["n_layer"])
    writer.add_feed_forward_length(ff)
    writer.add_head_count(c["n_head"])
    writer.add_head_count_kv(c["n_head_kv"])
    writer.add_rope_dimension_count(hd)
    writer.add_rope_freq_base(c["rope_base"])
    writer.add_layer_norm_rms_eps(c["rms_eps"])
    for key, value in (more or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_float32(key, value)
    weights = {}
    for name, shape in shapes.items():
        if name == leave_out:
            continue
        if len(shape) == 1:
            w = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            writer.add_tensor(name, w)
        else:
            w = (rng.standard_normal(shape) * 0.5).astype(np.float32)
            if qtype == gguf.GGMLQuantizationType.F16:
                w = w.astype(np.float16).astype(np.float32)
                writer.add_tensor(name, w.astype(np.float16))
            else:
                writer.add_tensor(name, w)
        weights[name] = w
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def naive_logits(w: dict[str, np.ndarray], tokens: list[int]) -> list[float]:
    """The model one token at a time, with plain loops where the pass uses matrices."""
    c = TINY
    hd, n_head, n_kv = c["head_dim"], c["n_head"], c["n_head_kv"]

    def matvec(m, v):
        return [sum(m[o, i] * v[i] for i in range(len(v))) for o in range(m.shape[0])]

    def norm(v, g):
        r = math.sqrt(sum(a * a for a in v) / len(v) + c["rms_eps"])
        return [a / r * gi for a, gi in zip(v, g, strict=True)]

    def turn(vec, pos):  # adjacent pairs, head by head
        out = list(vec)
        for h in range(len(vec) // hd):
            for i in range(hd // 2):
                theta = pos * c["rope_base"] ** (-2 * i / hd)
                a, b = vec[h * hd + 2 * i], vec[h * hd + 2 * i + 1]
                out[h * hd + 2 * i] = a * math.cos(theta) - b * math.sin(theta)
                out[h * hd + 2 * i + 1] = a * math.sin(theta) + b * math.cos(theta)
        return out

    xs = [list(w["token_embd.weight"][t].astype(np.float64)) for t in tokens]
    for b in range(c["n_layer"]):
        p = f"blk.{b}."
        keys, values, outs = [], [], []
        for pos, x in enumerate(xs):
            h_in = norm(x, w[p + "attn_norm.weight"])
            q = turn(matvec(w[p + "attn_q.weight"], h_in), pos)
            keys.append(turn(matvec(w[p + "attn_k.weight"], h_in), pos))
            values.append(matvec(w[p + "attn_v.weight"], h_in))
            mixed = []
            for h in range(n_head):
                kv = h // (n_head // n_kv)
                scores = [sum(q[h * hd + i] * k[kv * hd + i] for i in range(hd)) / math.sqrt(hd) for k in keys]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                weights = [v / sum(e) for v in e]
                mixed += [sum(a * v[kv * hd + i] for a, v in zip(weights, values, strict=True)) for i in range(hd)]
            x = [a + o for a, o in zip(x, matvec(w[p + "attn_output.weight"], mixed), strict=True)]
            f_in = norm(x, w[p + "ffn_norm.weight"])
            g, u = matvec(w[p + "ffn_gate.weight"], f_in), matvec(w[p + "ffn_up.weight"], f_in)
            hidden = [gi / (1 + math.exp(-gi)) * ui for gi, ui in zip(g, u, strict=True)]
            outs.append([a + o for a, o in zip(x, matvec(w[p + "ffn_down.weight"], hidden), strict=True)])
        xs = outs
    out = w.get("output.weight", w["token_embd.weight"])
    return matvec(out, norm(xs[-1], w["output_norm.weight"]))


@pytest.mark.parametrize("tied", [True, False], ids=["tied output", "own output"])
def test_two_blocks_against_the_naive_reference(tmp_path, tied):
    path = tmp_path / "tiny.gguf"
    w = write_tiny(path, tied=tied)
    model = forward.Model(path)
    hp = model.hp
    assert (hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab) == (2, 16, 4, 2, 4, 24, 32)
    assert (hp.rope_base, hp.rope_dims, hp.tied_output) == (500.0, 4, tied)
    assert hp.rms_eps == pytest.approx(1e-5)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6]]
    passes = forward.forward(model, prompts)
    for prompt, done in zip(prompts, passes, strict=True):
        expected = naive_logits(w, prompt)
        assert done.logits.tolist() == pytest.approx(expected, rel=1e-4, abs=1e-4)
        assert done.probs.sum() == pytest.approx(1.0)
        assert int(np.argmax(done.probs)) == int(np.argmax(expected))
        # The last position after the last block is the hidden state's last row.
        assert done.last_after_block.shape == (2, 16) and np.array_equal(done.last_after_block[-1], done.hidden[-1])
        # Lines 4 and 5 on every position: the last row is the pass's own logits.
        assert model.logits(done.hidden)[-1].tolist() == pytest.approx(done.logits.tolist(), rel=1e-5, abs=1e-5)


def test_one_prompt_alone_gives_what_it_gives_among_others(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny(path, seed=5)
    model = forward.Model(path)
    both = forward.forward(model, [[1, 2, 3], [7, 7]])
    alone = forward.forward(model, [[7, 7]])
    assert np.array_equal(both[1].logits, alone[0].logits)


def test_a_pass_asked_again_of_the_same_file_is_given_again(tmp_path, monkeypatch):
    """Lessons 4 and 8 ask for the same prompts on the same files in one run: the second time the kept pass comes back,
    the same bits, read-only; another file, other prompts or the file changed are computed."""
    path = tmp_path / "tiny.gguf"
    write_tiny(path, seed=7)
    computed = []
    real = forward._forward
    monkeypatch.setattr(forward, "_forward", lambda m, p: computed.append(p) or real(m, p))
    first = forward.forward(forward.Model(path), [[1, 2], [3]])
    again = forward.forward(forward.Model(str(path)), [[1, 2], [3]])
    assert len(computed) == 1 and [np.array_equal(a.logits, b.logits) for a, b in zip(first, again, strict=True)] == [True] * 2
    assert not again[0].logits.flags.writeable
    forward.forward(forward.Model(path), [[1, 2]])                  # other prompts
    forward.forward(forward.Model(path, keep_blocks=True), [[1, 2], [3]])  # a model that keeps its blocks reads them
    write_tiny(path, seed=8)                                         # the file rewritten
    changed = forward.forward(forward.Model(path), [[1, 2], [3]])
    assert len(computed) == 4 and not np.array_equal(changed[0].logits, first[0].logits)


def test_an_f16_file_is_read_through_its_dequantizer(tmp_path):
    path = tmp_path / "tiny-f16.gguf"
    w = write_tiny(path, qtype=gguf.GGMLQuantizationType.F16, seed=2)
    model = forward.Model(path)
    assert model.file.type_name("blk.0.attn_q.weight") == "F16"
    assert forward.forward(model, [[5, 6]])[0].logits.tolist() == pytest.approx(naive_logits(w, [5, 6]), rel=1e-4, abs=1e-4)


# --- the KV cache ----------------------------------------------------------------------------------------

def test_cached_decode_gives_what_recomputing_gives(tmp_path):
    path = tmp_path / "tiny.gguf"
    w = write_tiny(path, seed=7)
    model = forward.Model(path, keep_blocks=True)
    prompt = [4, 8, 15]
    with_cache, without = forward.greedy(model, prompt, 6, cached=True), forward.greedy(model, prompt, 6, cached=False)
    cached, cached_steps, fresh, fresh_steps = with_cache.tokens, with_cache.logits, without.tokens, without.logits
    assert cached == fresh and len(cached) == 6
    for a, b in zip(cached_steps, fresh_steps, strict=True):
        assert np.max(np.abs(a - b)) < 1e-4
    # The first step is the plain pass over the prompt, and each token is the argmax of its step.
    assert cached_steps[0].tolist() == pytest.approx(naive_logits(w, prompt), rel=1e-4, abs=1e-4)
    assert [int(np.argmax(s)) for s in cached_steps] == cached
    # Step 3 recomputed is the pass over the prompt and the first two tokens.
    assert fresh_steps[2].tolist() == pytest.approx(naive_logits(w, prompt + cached[:2]), rel=1e-4, abs=1e-4)


def test_the_cache_holds_one_entry_per_position(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    model = forward.Model(path, keep_blocks=True)
    cache = forward.KVCache()
    forward.next_logits(model, [1, 2, 3], cache)
    assert cache.length() == 3 and cache.keys[1].shape == (3, 2, 4)
    forward.next_logits(model, [1, 2, 3, 9], cache)
    assert cache.length() == 4 and sorted(cache.keys) == [0, 1]


# --- what the pass refuses -------------------------------------------------------------------------------

def test_another_architecture_is_refused_in_one_sentence(tmp_path):
    path = tmp_path / "other.gguf"
    write_tiny(path, arch="gpt2")
    with pytest.raises(ForwardError, match=r"llama-architecture models only, and .* is a 'gpt2' model\.$"):
        forward.Model(path)


def test_a_tensor_the_pass_does_not_use_is_refused(tmp_path):
    path = tmp_path / "bias.gguf"
    write_tiny(path, extra="blk.0.attn_q.bias")
    with pytest.raises(ForwardError, match=r"holds blk\.0\.attn_q\.bias, a tensor this llama pass does not use"):
        forward.Model(path)


def test_a_token_outside_the_vocabulary_is_refused(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    with pytest.raises(ForwardError, match="Token id 32 is outside the 32 rows"):
        forward.forward(forward.Model(path), [[1, 32]])


def test_the_memory_bound_by_hand():
    # Tied output: 4 bytes × (32,000 × 100 + one block: 100 × 10 × (2 × 10 + 2 × 5) + 3 × 100 × 300).
    hp = _hyper(n_embd=100, n_head=10, n_head_kv=5, head_dim=10, n_ff=300, n_vocab=32_000)
    assert forward.memory_bound_bytes(hp) == 4 * (3_200_000 + 30_000 + 90_000)
    # With its own output matrix the embedding is held as well.
    assert forward.memory_bound_bytes(_hyper(**{**hp.__dict__, "tied_output": False})) == 4 * (6_400_000 + 120_000)


# --- token ids back to text ------------------------------------------------------------------------------

def test_vocabulary_pieces_to_bytes():
    # Byte-level BPE: 'Ġ' stands for the space byte (the 33rd non-printable byte, chr(256 + 32)), 'Ċ' for b'\n'.
    assert forward.piece_bytes("\u0120Paris", "gpt2") == b" Paris"
    assert forward.piece_bytes("\u010a", "gpt2") == b"\n"
    assert forward.piece_bytes("\u0120==", "gpt2") == b" =="
    # Bytes past ASCII: 'Ã©' is the two bytes of 'é' in UTF-8 (0xC3, 0xA9), each printable in Latin-1.
    assert forward.piece_bytes("\u00c3\u00a9", "gpt2") == "é".encode("utf-8")
    # SentencePiece: '▁' is a space, <0x0A> one byte.
    assert forward.piece_bytes("\u2581Paris", "llama") == b" Paris"
    assert forward.piece_bytes("<0x0A>", "llama") == b"\n"
    assert forward.piece_bytes("<|im_start|>", "gpt2") == b"<|im_start|>"


def test_a_presets_vocabulary_is_read_from_its_file():
    from bytesup.models.catalog import ensure_model

    model = forward.Model(ensure_model("tiny-q8_0"))
    kind, pieces = forward.read_vocabulary(model.file.path)
    assert kind == "gpt2" and len(pieces) == model.hp.n_vocab
    assert model.token_bytes(7) == forward.piece_bytes(pieces[7], kind)


def test_pass_flops_by_hand():
    # Tied, width 100, 10 heads of 10 over 5 KV heads, feed-forward 300, 2 blocks, vocabulary 1,000.
    # One block's matrices: 100 × 10 × (2 × 10 + 2 × 5) + 3 × 100 × 300 = 30,000 + 90,000 = 120,000 numbers.
    hp = _hyper(n_layer=2, n_embd=100, n_head=10, n_head_kv=5, head_dim=10, n_ff=300, n_vocab=1000)
    assert forward.block_weights(hp) == 120_000
    # A 3-token prompt at once: 2 × 2 × 120,000 × 3 for the weights, attention over 1 + 2 + 3 = 6 pairs at
    # 4 × 2 blocks × 10 heads × 10 = 800 each, and 2 × 1,000 × 100 for the output on the last position.
    assert forward.pass_flops(hp, 0, 3) == 1_440_000 + 4_800 + 200_000
    # Position 3 alone with 0–2 cached: the weights once, attention over 4 positions.
    assert forward.pass_flops(hp, 3, 1) == 480_000 + 3_200 + 200_000


def test_greedy_counts_each_steps_flops(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    model = forward.Model(path, keep_blocks=True)
    cached, fresh = forward.greedy(model, [1, 2], 3, cached=True), forward.greedy(model, [1, 2], 3, cached=False)
    hp = model.hp
    assert cached.flops == [forward.pass_flops(hp, 0, 2), forward.pass_flops(hp, 2, 1), forward.pass_flops(hp, 3, 1)]
    assert fresh.flops == [forward.pass_flops(hp, 0, n) for n in (2, 3, 4)]
    assert len(cached.seconds) == len(fresh.seconds) == 3 and all(t > 0 for t in cached.seconds)


def test_rms_norm_adds_epsilon_inside_the_root_and_softmax_survives_large_logits():
    # mean square 1, eps 3: 1 / sqrt(1 + 3) = 0.5.
    assert forward.rms_norm(np.array([[1.0, -1.0]]), np.ones(2), 3.0).tolist() == [[0.5, -0.5]]
    # e^1000 overflows; less the largest logit it is e^0 and e^-1.
    assert forward.softmax(np.array([1000.0, 999.0])).tolist() == pytest.approx([1 / (1 + math.exp(-1)), 1 / (1 + math.e)])


def test_linear_rope_scaling_is_read_and_other_scalings_refused(tmp_path):
    path = tmp_path / "linear.gguf"
    write_tiny(path, more={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0})
    assert forward.Model(path).hp.rope_freq_scale == 0.25
    path = tmp_path / "yarn.gguf"
    write_tiny(path, more={"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0})
    with pytest.raises(ForwardError, match="uses RoPE scaling 'yarn', which this pass does not compute"):
        forward.Model(path)


def test_what_else_the_pass_refuses(tmp_path):
    path = tmp_path / "experts.gguf"
    write_tiny(path, more={"llama.expert_count": 8.0})
    with pytest.raises(ForwardError, match="mixture-of-experts"):
        forward.Model(path)
    path = tmp_path / "missing.gguf"
    write_tiny(path, leave_out="blk.1.ffn_down.weight")
    with pytest.raises(ForwardError, match=r"has no blk\.1\.ffn_down\.weight, which a llama model needs\.$"):
        forward.Model(path)


def test_the_byte_level_alphabet_covers_every_byte_once():
    assert sorted(forward._GPT2_BYTES.values()) == list(range(256))
    # The ends of the three printable runs stand for themselves; DEL (127), the first byte after '~', is chr(256 + 33).
    assert forward.piece_bytes("!~\u00a1\u00ac\u00ae\u00ff", "gpt2") == bytes([33, 126, 161, 172, 174, 255])
    assert forward.piece_bytes("\u0121", "gpt2") == bytes([127])
    # The soft hyphen (173) is not printable: 33 bytes below '!' and 34 from DEL to 160 come first, so it is chr(256 + 67).
    assert forward.piece_bytes("\u0143", "gpt2") == bytes([173])
    # A character outside the alphabet, and a piece of a tokenizer kind without one, are their UTF-8.
    assert forward.piece_bytes("\u20ac", "gpt2") == forward.piece_bytes("\u20ac", None) == "\u20ac".encode("utf-8")
    # SentencePiece byte tokens are two hex digits: 0x1F is 31, 0xFF is 255.
    assert forward.piece_bytes("<0x1F>", "llama") + forward.piece_bytes("<0xFF>", "llama") == bytes([31, 255])


def test_token_zero_is_a_row_and_blocks_are_dropped_unless_kept(tmp_path):
    path = tmp_path / "tiny.gguf"
    w = write_tiny(path, seed=4)
    model = forward.Model(path)
    assert np.array_equal(model.embed([0]), w["token_embd.weight"][[0]])
    forward.forward(model, [[0, 3]])
    assert model._blocks == {}  # one block's weights at a time: nothing held after the pass
    kept = forward.Model(path, keep_blocks=True)
    forward.forward(kept, [[0, 3]])
    assert sorted(kept._blocks) == [0, 1]


def test_each_steps_time_is_part_of_the_whole(tmp_path):
    import time

    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    model = forward.Model(path, keep_blocks=True)
    began = time.perf_counter()
    done = forward.greedy(model, [1, 2], 4, cached=True)
    whole = time.perf_counter() - began
    assert 0 < sum(done.seconds) <= whole
