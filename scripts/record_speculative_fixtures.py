"""Record the /completion answers the speculative-decoding tests parse, from the real embedded engine.

    .venv/bin/python scripts/record_speculative_fixtures.py

Starts three servers on free ports, one after another, all on the default model's f32 width
(smollm2-135m-f32, derived from the default model the first time):
  - plain (no speculation),
  - with its q4_1 width as a draft: --spec-type draft-simple --spec-draft-n-max 8,
  - with n-gram speculation: --spec-type ngram-simple,
and sends each the same greedy requests (temperature 0, fixed seed, no prompt cache, ignore_eos,
return_tokens). Writes tests/fixtures/server/completion_spec_<server>_<prompt>.json as
{"request": {...}, "server_flags": [...], "status": ..., "response": ...}. The synthetic tiny model
would draft at random: the counters are only meaningful on real weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from bytesup.llama import process
from bytesup.models.catalog import ensure_model

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "server"
TARGET = "smollm2-135m-f32"
DRAFT = "smollm2-135m-q4_1"
PROMPTS = {
    "short": "The capital of France is",
    # A period of a few dozen tokens: ngram-simple's 12-token lookup finds the previous occurrence.
    "repetitive": ("Row, row, row your boat, gently down the stream. "
                   "Merrily, merrily, merrily, merrily, life is but a dream.\n") * 3,
}
SERVERS = {
    "plain": ([], ("short", "repetitive")),
    "draft": (["--spec-type", "draft-simple", "--spec-draft-n-max", "8"], ("short",)),
    "ngram": (["--spec-type", "ngram-simple"], ("repetitive",)),
}


def main() -> int:
    target = ensure_model(TARGET)
    draft = ensure_model(DRAFT)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (flags, prompts) in SERVERS.items():
        if name == "draft":
            flags = ["--spec-draft-model", str(draft), *flags]
        port = process.free_port()
        process.start_server(target, ["--port", str(port), "-c", "512", *flags])
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as http:
                for prompt_name in prompts:
                    body = {"prompt": PROMPTS[prompt_name], "n_predict": 64, "temperature": 0, "seed": 42,
                            "cache_prompt": False, "ignore_eos": True, "return_tokens": True}
                    resp = http.post("/completion", json=body)
                    entry = {"request": {"method": "POST", "path": "/completion", "json": body},
                             "server_flags": [f if f != str(draft) else Path(f).name for f in flags],
                             "model": target.name, "status": resp.status_code, "response": resp.json()}
                    out = OUT / f"completion_spec_{name}_{prompt_name}.json"
                    out.write_text(json.dumps(entry, indent=2, ensure_ascii=False) + "\n")
                    t = entry["response"].get("timings", {})
                    print(f"recorded {out.name}: draft_n {t.get('draft_n')}, accepted {t.get('draft_n_accepted')}")
        finally:
            process.stop_server(port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
