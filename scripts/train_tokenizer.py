"""Train the shipped byte-level BPE tokenizer from ``src/bytesup/data/corpus.txt``.

The default models built by ``bytesup.models.catalog`` carry a real GPT-2 style
byte-level BPE vocabulary. This script produces it. Its two outputs are
committed to the repository, so building a model never trains anything and
gives the same file on every machine:

    src/bytesup/data/tokenizer/vocab.json   token -> id, ordered by id
    src/bytesup/data/tokenizer/merges.txt   one merge "left right" per line, by rank

Re-run it only after changing the corpus or the settings below (it needs the
optional ``tokenizers`` package, ``pip install -e '.[tokenizer]'``)::

    .venv/bin/python scripts/train_tokenizer.py            # writes the two files
    .venv/bin/python scripts/train_tokenizer.py --check    # compares, writes nothing

Every model file built afterwards changes (its sha256 too), so rebuild the
models and update any recorded checksums after re-training.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "src" / "bytesup" / "data"
CORPUS = DATA_DIR / "corpus.txt"
OUT_DIR = DATA_DIR / "tokenizer"

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<s>", "</s>"]  # ids 0 and 1: BOS and EOS

# A few strings that must survive encode -> decode unchanged.
SAMPLES = [
    "The capital of France is Paris.",
    "def fibonacci(n):\n    if n == 0:\n        return 0",
    "for (int i = 0; i < n; i++) {\n\ttotal += a[i];\n}",
    "x == y",
    "café naïve Zürich 東京 123 4096",
]


def train(corpus: Path, vocab_size: int = VOCAB_SIZE):
    """Train and return a ``tokenizers.Tokenizer`` (byte-level BPE, GPT-2 pre-tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(corpus)], trainer=trainer)
    return tok


def export(tok) -> tuple[str, str]:
    """The text of vocab.json and merges.txt for a trained tokenizer."""
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    ordered = sorted(vocab.items(), key=lambda kv: kv[1])
    ids = [i for _, i in ordered]
    if ids != list(range(len(ids))):
        raise SystemExit("token ids are not 0..n-1 without gaps")
    merges = []
    for m in model["merges"]:
        # tokenizers >= 0.20 stores a merge as [left, right]; older ones as "left right".
        left, right = m if isinstance(m, list) else m.split(" ", 1)
        if " " in left or " " in right:
            raise SystemExit(f"a merge contains a space: {m!r}")
        merges.append(f"{left} {right}")
    vocab_text = json.dumps(dict(ordered), ensure_ascii=False, indent=0) + "\n"
    merges_text = "".join(m + "\n" for m in merges)
    return vocab_text, merges_text


def self_check(tok) -> None:
    for s in SAMPLES:
        back = tok.decode(tok.encode(s).ids)
        if back != s:
            raise SystemExit(f"round trip failed: {s!r} -> {back!r}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    ap.add_argument("--check", action="store_true", help="only compare with the files in --out")
    args = ap.parse_args(argv)

    tok = train(args.corpus, args.vocab_size)
    self_check(tok)
    vocab_text, merges_text = export(tok)
    n_vocab = tok.get_vocab_size()
    n_merges = merges_text.count("\n")

    vocab_path = args.out / "vocab.json"
    merges_path = args.out / "merges.txt"
    if args.check:
        same = (
            vocab_path.is_file()
            and merges_path.is_file()
            and vocab_path.read_text(encoding="utf-8") == vocab_text
            and merges_path.read_text(encoding="utf-8") == merges_text
        )
        print(f"{'same' if same else 'DIFFERENT'}: {n_vocab} tokens, {n_merges} merges")
        return 0 if same else 1

    args.out.mkdir(parents=True, exist_ok=True)
    # newline="\n": identical bytes on Windows too.
    vocab_path.write_text(vocab_text, encoding="utf-8", newline="\n")
    merges_path.write_text(merges_text, encoding="utf-8", newline="\n")
    print(f"wrote {vocab_path} ({n_vocab} tokens) and {merges_path} ({n_merges} merges)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
