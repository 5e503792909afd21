"""Write the project's own reference for the default model from a recorded run of lesson 4.

    .venv/bin/python scripts/reference_from_run.py outputs/<run folder> [references/smollm2-135m-q4_1_cpu.json]

For each of lesson 4's four prompts it takes, from the run's fact `top_tokens` (or, in a run made
before lessons stated it, from the tables of the same names), the top token, its probability and
the set of the top eight tokens, with tolerances that cover float differences between CPUs
(llama.cpp's CPU kernels round differently on AVX2, AVX-512 and NEON), and a scope that names the
model file by sha256 and any host without a GPU. Each figure addresses the fact by name
(`"fact": "top_tokens", "key": <table>, "row": {"rank": 1}, "field": "probability"`).

Units: the fact holds probabilities as fractions of 1; the reference states them in percent
(`"unit": "%"`, tolerances in percentage points), and `bytesup check` converts the fact's
fractions to percent before comparing.

`bytesup check` then applies the reference to every run of the default model on a CPU. It is
labelled as this project's reference, not a published figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bytesup.check.compare import load_run
from bytesup.check.evidence import FactShapeError, shown_top_tokens
from bytesup.models.smollm2 import GGUF_SHA256, SOURCE
from bytesup.files import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
LESSON = "04_next_token"
PROMPTS = {  # table name -> (short id, prompt shown in the claim)
    "top8_capital_of_france": ("paris", "The capital of France is"),
    "top8_cat_sat": ("cat_sat", "The cat sat on the"),
    "top8_fibonacci": ("fibonacci", "def fibonacci(n):\\n    if n"),
    "top8_for_loop": ("for_loop", "for (int i = 0; i <"),
}
PROBABILITY_TOLERANCE_PP = 2.0  # percentage points: CPU-to-CPU float differences stay well inside
SHARE_TOLERANCE_PP = 3.0


def main(run_dir: Path, out: Path) -> int:
    run = load_run(run_dir)
    result = run.results.get(LESSON)
    if result is None:
        print(f"error: {run_dir} has no {LESSON} result; run `bytesup run {LESSON}` on the default model first", file=sys.stderr)
        return 1
    model = (run.manifest or {}).get("model") or {}
    if model.get("sha256") != GGUF_SHA256:
        print(f"error: {run_dir} did not run the default model {SOURCE} (sha256 {model.get('sha256') or 'unknown'}, "
              f"expected {GGUF_SHA256}); record a run of it first (make run)", file=sys.stderr)
        return 1
    host = (run.manifest or {}).get("host") or {}
    if host.get("gpus"):
        print(f"error: {run_dir} ran on a host with a GPU; this reference is for llama.cpp's CPU backend", file=sys.stderr)
        return 1
    try:
        tables = {t.key: t for t in shown_top_tokens(result)}
    except FactShapeError as exc:
        print(f"error: {run_dir}'s {LESSON} fact {exc}", file=sys.stderr)
        return 1
    figures = []
    for key, (short, prompt) in PROMPTS.items():
        shown = tables.get(key)
        if shown is None or len(shown.tokens) < 8 or any(t.probability is None for t in shown.tokens[:8]):
            continue
        tokens = [t.token for t in shown.tokens]
        percents = [100.0 * t.probability for t in shown.tokens[:8] if t.probability is not None]
        address = {"lesson": LESSON, "fact": "top_tokens", "key": key}
        figures += [
            {"id": f"{short}_top_token", "claim": f"most probable token after {prompt!r}", **address,
             "row": {"rank": 1}, "field": "token", "published": tokens[0], "tolerance": {}},
            {"id": f"{short}_top_probability", "claim": f"probability of the most probable token after {prompt!r}", **address,
             "row": {"rank": 1}, "field": "probability", "published": round(percents[0], 2), "unit": "%",
             "tolerance": {"absolute": PROBABILITY_TOLERANCE_PP}},
            {"id": f"{short}_top8", "claim": f"the eight most probable tokens after {prompt!r}", **address,
             "field": "token", "aggregate": "set", "rows": 8, "published": tokens[:8], "tolerance": {"missing": 1}},
            {"id": f"{short}_top8_share", "claim": f"share of the top eight tokens after {prompt!r}", **address,
             "field": "probability", "aggregate": "sum", "rows": 8, "published": round(sum(percents), 2), "unit": "%",
             "tolerance": {"absolute": SHARE_TOLERANCE_PP}},
        ]
    if len(figures) != 4 * len(PROMPTS):
        print(f"error: {run_dir}'s {LESSON} lacks eight tokens with probabilities for some of {', '.join(PROMPTS)}", file=sys.stderr)
        return 1
    reference = {
        "schema_version": 1,
        "kind": "bytesup-reference",
        "name": "lesson 4 on SmolLM2-135M-Instruct Q4_1 (bytesup's own reference, CPU)",
        "source": (f"bytesup's own reference, not a published figure: taken from the recorded run {run_dir.name} "
                   f"({host.get('cpu') or 'a CPU'}, {host.get('cores') or '?'} cores, engine "
                   f"{((run.manifest or {}).get('engine') or {}).get('build') or 'unknown'}) by scripts/reference_from_run.py"),
        "measured_on": (run.manifest or {}).get("date"),
        "scope": {
            "model": {"name": "SmolLM2-135M-Instruct", "quantization": "Q4_1", "sha256": model.get("sha256"),
                      "size_bytes": model.get("size_bytes")},
            "hardware": {"name": "any CPU (no GPU)", "cpu_only": True},
            "engine": {"name": "llama.cpp llama-server or the embedded engine", "engines": ["llama-server", "embedded"]},
        },
        "figures": figures,
    }
    write_json_atomic(out, reference)
    print(f"wrote {out} ({len(figures)} figures)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else ROOT / "references" / "smollm2-135m-q4_1_cpu.json"))
