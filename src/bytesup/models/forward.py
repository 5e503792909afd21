"""Lesson 4's forward pass in numpy, from the bytes of a llama GGUF file.

The whole model in the lesson's lines (`forward` below):

    X = embed(tokens)                            # 1. embed: one row lookup per token
    for b in range(n_layer):                     # 2. the blocks, in order
        X = block(b, X)                          #    attention, then feed-forward
    last = X[-1]                                 # 3. keep only the last position
    last = rms_norm(last, output_norm)           # 4. one final normalization
    logits = output @ last                       # 5. one score per vocabulary entry
    probs = softmax(logits)                      # 6. scores -> probabilities

Every hyperparameter comes from the file: blocks, heads, KV heads, head width, the RMS epsilon, the
RoPE base, dimensions and linear scale, and whether the output matrix is the token embedding.
RoPE turns adjacent pairs (x[2i], x[2i+1]), llama.cpp's "normal" mode for the llama architecture
(`convert_hf_to_gguf.py` permutes the rows of attn_q and attn_k to match). Query head h reads KV
head h // (n_head / n_head_kv).

Memory: the tensors are read and dequantized one at a time, a block's seven matrices when that
block runs, and dropped after it unless `keep_blocks`; held throughout are the output matrix
(n_vocab × width float32; the token embedding when tied), the final norm and the activations.
`memory_bound_bytes` states that bound for a file. Each matrix is widened to float64 once for all the
products that use it (every prompt of a pass; every step of a generation when blocks are kept, which
then holds them in float64 as well), not once per product.

Weights and activations are float32, and every operation is computed in float64 and rounded back to
float32 (`product`, `rms_norm`, `softmax`, `silu`): the order in which a CPU's BLAS or SIMD kernels add a
sum changes a float64 result far below float32's last bit, so the pass gives the same float32 bits on
every CPU (AVX2 or AVX-512 kernels alike) and a replay anywhere recomputes what the run computed. BLAS
runs on one thread: a prompt's few rows make small products, where a second thread costs more than it
gives on a busy machine.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from bytesup.course.depthtime import attention_flops_per_position
from bytesup.errors import BytesupError
from bytesup.models.gguf import TensorFile, read_vocabulary

__all__ = ["ForwardError", "Hyper", "Model", "Pass", "forward", "rms_norm", "rope", "softmax", "swiglu"]

BLOCK_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
GLOBAL_TENSORS = ("token_embd.weight", "output_norm.weight", "output.weight")


class ForwardError(BytesupError):
    """A model the numpy forward pass cannot compute correctly (one sentence naming what)."""


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters of a llama model, as its GGUF states them."""

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rms_eps: float
    rope_base: float
    rope_dims: int          # how many of a head's dimensions RoPE turns (the rest pass unchanged)
    rope_freq_scale: float  # 1 / the linear scaling factor (1.0 without scaling)
    tied_output: bool       # no output.weight: the output matrix is token_embd

    @property
    def group(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_head // self.n_head_kv


def hyper_from(tf: TensorFile) -> Hyper:
    """Read the hyperparameters from the file, refusing in one sentence what this pass cannot compute."""
    md, where = tf.metadata, tf.path
    arch = md.get("general.architecture")
    if arch != "llama":
        raise ForwardError(f"The numpy forward pass computes llama-architecture models only, and {where} is a {arch!r} model.")

    def key(suffix: str, default: Any = None) -> Any:
        value = md.get(f"llama.{suffix}", default)
        if value is None:
            raise ForwardError(f"{where} has no llama.{suffix}, which the forward pass needs.")
        return value

    if md.get("llama.expert_count"):
        raise ForwardError(f"{where} is a mixture-of-experts llama ({md['llama.expert_count']} experts), which this pass does not compute.")
    scaling = md.get("llama.rope.scaling.type", "none")
    factor = float(md.get("llama.rope.scaling.factor") or md.get("llama.rope.scale_linear") or 1.0)
    if scaling not in ("none", "linear") or factor <= 0:
        raise ForwardError(f"{where} uses RoPE scaling {scaling!r}, which this pass does not compute (only none and linear).")
    if "token_embd.weight" not in tf.names:
        raise ForwardError(f"{where} has no token_embd.weight, so it has no embedding to look tokens up in.")
    n_vocab, n_embd = tf.shape("token_embd.weight")
    if key("embedding_length") != n_embd:
        raise ForwardError(f"{where} says its width is {key('embedding_length')} but its token_embd rows hold {n_embd} numbers.")
    n_head = int(key("attention.head_count"))
    n_head_kv = int(md.get("llama.attention.head_count_kv") or n_head)
    head_dim = int(md.get("llama.attention.key_length") or n_embd // n_head)
    if n_head % n_head_kv:
        raise ForwardError(f"{where} has {n_head} query heads over {n_head_kv} KV heads, which do not share out evenly.")
    hp = Hyper(n_layer=int(key("block_count")), n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
               n_ff=int(key("feed_forward_length")), n_vocab=n_vocab, rms_eps=float(key("attention.layer_norm_rms_epsilon")),
               rope_base=float(md.get("llama.rope.freq_base") or 10000.0),
               rope_dims=int(md.get("llama.rope.dimension_count") or head_dim), rope_freq_scale=1.0 / factor,
               tied_output="output.weight" not in tf.names)
    _check_tensors(tf, hp)
    return hp


def _check_tensors(tf: TensorFile, hp: Hyper) -> None:
    expected = {"token_embd.weight", "output_norm.weight", *(() if hp.tied_output else ("output.weight",))}
    expected |= {f"blk.{b}.{name}.weight" for b in range(hp.n_layer) for name in BLOCK_TENSORS}
    extra = [n for n in tf.names if n not in expected]
    if extra:
        raise ForwardError(f"{tf.path} holds {extra[0]}, a tensor this llama pass does not use, so its answer would be wrong.")
    missing = sorted(expected - set(tf.names))
    if missing:
        raise ForwardError(f"{tf.path} has no {missing[0]}, which a llama model needs.")


# --- the parts, each as lessons 2, 3 and 6 explain it -----------------------------------------

F32, F64 = np.float32, np.float64


def _rounded(result: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
    """A float64 result back in the inputs' precision: float32 unless an input is float64."""
    return result if any(np.asarray(a).dtype == F64 for a in inputs) else result.astype(F32)


def product(x: np.ndarray, w: np.ndarray, wide: np.ndarray | None = None) -> np.ndarray:
    """x · wᵀ, each dot product summed in float64 and rounded to float32 (the same bits on any CPU's kernels).
    `wide`: w already widened to float64 (`widened`), for a matrix used in several products; the same result."""
    return _rounded(np.asarray(x, dtype=F64) @ (np.asarray(w, dtype=F64) if wide is None else wide).T, x, w)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Rescale each row so its root mean square is 1, then multiply by the learned weight (lesson 3)."""
    x64 = np.asarray(x, dtype=F64)
    return _rounded(x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * weight, x)


def rope(x: np.ndarray, positions: np.ndarray, base: float, n_rot: int, freq_scale: float = 1.0) -> np.ndarray:
    """Turn each adjacent pair (x[2i], x[2i+1]) of every head by position × freq_scale × base^(−2i / n_rot).

    x: (positions, heads, head width); dimensions from n_rot on pass unchanged."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    theta = np.outer(np.asarray(positions, dtype=np.float64) * freq_scale, base ** (-2.0 * i / n_rot))  # (N, n_rot/2)
    cos, sin = np.cos(theta)[:, None, :].astype(np.float32), np.sin(theta)[:, None, :].astype(np.float32)
    even, odd = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out = x.copy()
    out[..., 0:n_rot:2] = even * cos - odd * sin
    out[..., 1:n_rot:2] = even * sin + odd * cos
    return out


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """e^z over the sum of e^z (less the largest z, which changes nothing: lesson 4), in float64; float32 in, float32 out."""
    z64 = np.asarray(z, dtype=F64)
    e = np.exp(z64 - np.max(z64, axis=axis, keepdims=True))
    return _rounded(e / np.sum(e, axis=axis, keepdims=True), z)


def silu(g: np.ndarray) -> np.ndarray:
    """g / (1 + e^−g), in float64, rounded to float32."""
    g64 = np.asarray(g, dtype=F64)
    return _rounded(g64 / (1.0 + np.exp(-g64)), g)


def swiglu(x: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray, wide: "BlockWeights | None" = None) -> np.ndarray:
    """The feed-forward half: down · (silu(gate · x) × up · x), silu(a) = a / (1 + e^−a). `wide`: the block's matrices
    widened to float64 (`widened`)."""
    g, u, d = (None, None, None) if wide is None else (wide.ffn_gate, wide.ffn_up, wide.ffn_down)
    return product(silu(product(x, gate, g)) * product(x, up, u), down, d)


@dataclass
class BlockWeights:
    """One block's tensors, float32; matrices as (outputs, inputs)."""

    attn_norm: np.ndarray
    attn_q: np.ndarray
    attn_k: np.ndarray
    attn_v: np.ndarray
    attn_output: np.ndarray
    ffn_norm: np.ndarray
    ffn_gate: np.ndarray
    ffn_up: np.ndarray
    ffn_down: np.ndarray


MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def _of(wide: BlockWeights | None, name: str) -> np.ndarray | None:
    return None if wide is None else getattr(wide, name)


def widened(w: BlockWeights) -> BlockWeights:
    """The block's seven matrices in float64 (its norms as they are): what `product` would widen on each use."""
    return BlockWeights(**{name: np.asarray(getattr(w, name), dtype=F64) if name in MATRICES else getattr(w, name)
                           for name in BLOCK_TENSORS})


@dataclass
class KVCache:
    """Every earlier position's keys and values, per block (lesson 6): (positions, KV heads, head width)."""

    keys: dict[int, np.ndarray] = field(default_factory=dict)
    values: dict[int, np.ndarray] = field(default_factory=dict)

    def length(self) -> int:
        return next(iter(self.keys.values())).shape[0] if self.keys else 0

    def extend(self, b: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if b in self.keys:
            k, v = np.concatenate([self.keys[b], k]), np.concatenate([self.values[b], v])
        self.keys[b], self.values[b] = k, v
        return k, v


def attention(w: BlockWeights, x: np.ndarray, hp: Hyper, positions: np.ndarray,
              cache: KVCache | None = None, b: int = 0, wide: BlockWeights | None = None) -> np.ndarray:
    """Causal grouped-query self-attention over x (N, width) at `positions`, with RoPE on queries and keys. `wide`:
    the block's matrices widened to float64 (`widened`)."""
    n = x.shape[0]
    q = product(x, w.attn_q, _of(wide, "attn_q")).reshape(n, hp.n_head, hp.head_dim)
    k = product(x, w.attn_k, _of(wide, "attn_k")).reshape(n, hp.n_head_kv, hp.head_dim)
    v = product(x, w.attn_v, _of(wide, "attn_v")).reshape(n, hp.n_head_kv, hp.head_dim)
    q = rope(q, positions, hp.rope_base, hp.rope_dims, hp.rope_freq_scale)
    k = rope(k, positions, hp.rope_base, hp.rope_dims, hp.rope_freq_scale)
    if cache is not None:  # the keys and values of every earlier position, then these
        k, v = cache.extend(b, k, v)
    kv_head = np.arange(hp.n_head) // hp.group  # query head h reads KV head h // group
    keys, values = k[:, kv_head], v[:, kv_head]
    scores = (np.einsum("nhd,thd->hnt", q.astype(F64), keys.astype(F64)) / math.sqrt(hp.head_dim)).astype(F32)
    later = np.arange(keys.shape[0])[None, :] > np.asarray(positions)[:, None]  # a position sees only those before it
    scores = np.where(later[None], -np.inf, scores)
    mixed = np.einsum("hnt,thd->nhd", softmax(scores).astype(F64), values.astype(F64)).astype(F32)
    return product(mixed.reshape(n, hp.n_head * hp.head_dim), w.attn_output, _of(wide, "attn_output"))


def block(w: BlockWeights, x: np.ndarray, hp: Hyper, positions: np.ndarray,
          cache: KVCache | None = None, b: int = 0, wide: BlockWeights | None = None) -> np.ndarray:
    """One block: attention, then feed-forward, each on the RMS-normed input and added back (the residual). `wide`:
    the block's matrices widened to float64 (`widened`), for a block run more than once."""
    x = x + attention(w, rms_norm(x, w.attn_norm, hp.rms_eps), hp, positions, cache, b, wide)
    return x + swiglu(rms_norm(x, w.ffn_norm, hp.rms_eps), w.ffn_gate, w.ffn_up, w.ffn_down, wide)


# --- the model file -------------------------------------------------------------------------------

class Model:
    """A llama GGUF, read one tensor at a time; `keep_blocks` holds each block once it is dequantized."""

    def __init__(self, path: str | os.PathLike, keep_blocks: bool = False):
        self.file = TensorFile(path)
        self.hp = hyper_from(self.file)
        self.keep_blocks = keep_blocks
        self._blocks: dict[int, BlockWeights] = {}
        self._wide: dict[int, BlockWeights] = {}
        self._output_wide: np.ndarray | None = None
        self._vocabulary: tuple[str | None, list[str]] | None = None
        self.output_norm = self.file.array("output_norm.weight")[0]
        # The output matrix: one row per vocabulary entry. Tied to the embedding when the file has no output.weight.
        self.output = self.file.array("token_embd.weight" if self.hp.tied_output else "output.weight")

    def embed(self, tokens: list[int]) -> np.ndarray:
        """One row of token_embd per token (lesson 2)."""
        bad = [t for t in tokens if not 0 <= t < self.hp.n_vocab]
        if bad:
            raise ForwardError(f"Token id {bad[0]} is outside the {self.hp.n_vocab:,} rows of {self.file.path}'s token_embd.")
        if self.hp.tied_output:
            return self.output[np.asarray(tokens, dtype=np.int64)]
        return self.file.array("token_embd.weight", rows=list(tokens))

    def block(self, b: int) -> BlockWeights:
        if b in self._blocks:
            return self._blocks[b]
        w = BlockWeights(**{name: self._tensor(f"blk.{b}.{name}.weight") for name in BLOCK_TENSORS})
        if self.keep_blocks:
            self._blocks[b] = w
        return w

    def wide(self, b: int) -> BlockWeights | None:
        """Block b's matrices in float64 when blocks are kept (widened the first time, held with the block), else None."""
        if not self.keep_blocks:
            return None
        if b not in self._wide:
            self._wide[b] = widened(self.block(b))
        return self._wide[b]

    def _tensor(self, name: str) -> np.ndarray:
        a = self.file.array(name)
        return a[0] if name.endswith("_norm.weight") else a

    def token_bytes(self, token_id: int) -> bytes:
        """What a token id stands for, from the file's own vocabulary."""
        if self._vocabulary is None:
            self._vocabulary = read_vocabulary(self.file.path)
        kind, pieces = self._vocabulary
        return piece_bytes(pieces[token_id], kind)

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Lines 4 and 5 on any rows of hidden states: the final norm, then one score per vocabulary entry."""
        with threadpool_limits(1, user_api="blas"):
            return product(rms_norm(hidden, self.output_norm, self.hp.rms_eps), self.output, self.output_wide())

    def output_wide(self) -> np.ndarray:
        """The output matrix in float64, widened the first time and held with the model for every later call."""
        if self._output_wide is None:
            self._output_wide = np.asarray(self.output, dtype=F64)
        return self._output_wide


def block_weights(hp: Hyper) -> int:
    """Numbers in one block's seven matrices: attn_q and attn_output (width × heads × head width each), attn_k and
    attn_v (width × KV heads × head width each), ffn_gate, ffn_up and ffn_down (width × feed-forward width each)."""
    return hp.n_embd * hp.head_dim * (2 * hp.n_head + 2 * hp.n_head_kv) + 3 * hp.n_embd * hp.n_ff


def memory_bound_bytes(hp: Hyper) -> int:
    """What `forward` holds at most, besides activations: the output matrix, the token embedding when it is
    another tensor, and one block's matrices, all float32."""
    embedding = 0 if hp.tied_output else hp.n_vocab * hp.n_embd
    return 4 * (hp.n_vocab * hp.n_embd + embedding + block_weights(hp))


def pass_flops(hp: Hyper, start: int, new: int) -> int:
    """FLOPs of one pass over positions start … start + new − 1, the earlier ones held in the KV cache: two per
    weight of every block for each new position, attention's scores and weighted sums (2 × 2 × heads × head width
    for each position a new one attends to, itself included), and the output matrix on the last position alone."""
    attended = sum(range(start + 1, start + new + 1))
    return (2 * hp.n_layer * block_weights(hp) * new + attention_flops_per_position(hp.n_layer, hp.n_head, hp.head_dim) * attended
            + 2 * hp.n_vocab * hp.n_embd)


# --- the forward pass --------------------------------------------------------------------------

@dataclass
class Pass:
    """One prompt's pass: the last block's hidden states, the last position after every block, and the answer."""

    tokens: list[int]
    hidden: np.ndarray                 # (N, width): every position after the last block, before the final norm
    last_after_block: np.ndarray       # (n_layer, width): the last position after each block
    logits: np.ndarray                 # (n_vocab,) float32
    probs: np.ndarray                  # (n_vocab,) float64


# The last passes computed, by file and prompts: lesson 8's accuracy asks for the same four prompts on the same two files
# as lesson 4's pass (the served width and the f32 width), in the same run. The same bytes give the same bits.
PASSES_KEPT = 8
_kept: dict[tuple[Any, ...], list[Pass]] = {}


def file_identity(path: str | os.PathLike) -> tuple[str, int, int, int]:
    """A file as the kept passes know it: its real path, inode, size and modification time (the same file,
    unchanged)."""
    st = os.stat(path)
    return os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns


def forward(model: Model, prompts: list[list[int]]) -> list[Pass]:
    """Lesson 4's fifteen lines, for several prompts at once: each block's weights are read once for all. The last
    PASSES_KEPT results are kept for the process, by file and prompts; a kept one is given again (its arrays
    read-only), as the same bytes give the same bits. A model that keeps its blocks (`keep_blocks`) reads them
    every time: its caller wants them held."""
    if model.keep_blocks:
        return _forward(model, prompts)
    key = (file_identity(model.file.path), tuple(tuple(p) for p in prompts))
    if key in _kept:
        _kept[key] = _kept.pop(key)  # the most recently used, last
        return list(_kept[key])
    passes = _forward(model, prompts)
    for d in passes:
        for array in (d.hidden, d.last_after_block, d.logits, d.probs):
            array.setflags(write=False)
    _kept[key] = passes
    while len(_kept) > PASSES_KEPT:
        del _kept[next(iter(_kept))]
    return list(passes)


def _forward(model: Model, prompts: list[list[int]]) -> list[Pass]:
    with threadpool_limits(1, user_api="blas"):
        X = [model.embed(tokens) for tokens in prompts]                    # 1. embed: one row lookup per token
        positions = [np.arange(len(tokens)) for tokens in prompts]
        seen: list[list[np.ndarray]] = [[] for _ in prompts]
        for b in range(model.hp.n_layer):                                  # 2. the blocks, in order
            w = model.block(b)
            wide = model.wide(b) or widened(w)                             #    (in float64 once for every prompt)
            X = [block(w, x, model.hp, pos, wide=wide) for x, pos in zip(X, positions, strict=True)]  # attention, then feed-forward
            del wide
            for lasts, x in zip(seen, X, strict=True):
                lasts.append(x[-1])
        passes = []
        output = model._output_wide if model._output_wide is not None else np.asarray(model.output, dtype=F64)
        for tokens, x, lasts in zip(prompts, X, seen, strict=True):
            last = x[-1]                                                   # 3. keep only the last position
            last = rms_norm(last, model.output_norm, model.hp.rms_eps)     # 4. one final normalization
            logits = product(last, model.output, output)                   # 5. one score per vocabulary entry
            probs = softmax(logits.astype(np.float64))                     # 6. scores -> probabilities
            passes.append(Pass(list(tokens), x, np.stack(lasts), logits, probs))
    return passes


# --- token ids back to text, from the file's own vocabulary ------------------------------------------

def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read back: every byte is one printable character in the vocabulary, the
    printable ones as themselves and the others as chr(256), chr(257), … in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_GPT2_BYTES = _gpt2_byte_decoder()


def piece_bytes(piece: str, kind: str | None) -> bytes:
    """The bytes a vocabulary piece stands for: byte-level BPE ("gpt2": 'ĠParis' is b' Paris'), SentencePiece
    ("llama": '▁Paris' is b' Paris', '<0x0A>' is one byte), any other kind as its UTF-8."""
    if kind == "gpt2":
        return b"".join(bytes([_GPT2_BYTES[c]]) if c in _GPT2_BYTES else c.encode("utf-8") for c in piece)
    if kind == "llama":
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")
    return piece.encode("utf-8")


# --- generating: with the KV cache and without (lesson 6) -----------------------------------------------

def next_logits(model: Model, tokens: list[int], cache: KVCache | None = None) -> np.ndarray:
    """The last position's logits after `tokens`; with a cache only the tokens it does not yet hold are computed."""
    start = cache.length() if cache is not None else 0
    x = model.embed(tokens[start:])
    positions = np.arange(start, len(tokens))
    for b in range(model.hp.n_layer):
        x = block(model.block(b), x, model.hp, positions, cache, b, model.wide(b))
    return model.logits(x[-1:])[0]


@dataclass
class Generation:
    """n greedy tokens and, per step, its logits, its wall time and its FLOPs (`pass_flops`)."""

    tokens: list[int]
    logits: list[np.ndarray]
    seconds: list[float]
    flops: list[int]


def greedy(model: Model, prompt: list[int], n: int, cached: bool) -> Generation:
    """n tokens, each the most probable: with a KV cache (one new position per pass) or recomputing the whole prefix."""
    tokens = list(prompt)
    done = Generation([], [], [], [])
    cache = KVCache() if cached else None
    with threadpool_limits(1, user_api="blas"):
        for _ in range(n):
            start = cache.length() if cache is not None else 0
            began = time.perf_counter()
            logits = next_logits(model, tokens, cache)
            done.seconds.append(time.perf_counter() - began)
            done.flops.append(pass_flops(model.hp, start, len(tokens) - start))
            done.logits.append(logits)
            tokens.append(int(np.argmax(logits)))
    done.tokens = tokens[len(prompt):]
    return done
