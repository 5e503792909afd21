"""Re-record the server responses the tests parse, from the real embedded engine.

    .venv/bin/python scripts/record_fixtures.py

Starts llama.cpp (through scripts' own start logic) on the synthetic tiny-q8_0 model (the responses are for parsing tests) on a free port,
sends each request below, and writes tests/fixtures/server/<name>.json as
{"request": {...}, "status": ..., "response": ...} (or "response_text" for /metrics).
No headers are stored, so no API key can end up here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from bytesup.llama import process
from bytesup.models.catalog import SYNTHETIC_DEFAULT, ensure_model

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "server"

REQUESTS = {
    "health": ("GET", "/health", None),
    "props": ("GET", "/props", None),
    "v1_models": ("GET", "/v1/models", None),
    "slots": ("GET", "/slots", None),
    "tokenize_paris": ("POST", "/tokenize", {"content": "The capital of France is Paris", "with_pieces": True, "add_special": False}),
    # café, 東京 and 🦙: pieces that are not whole UTF-8 characters come back as byte lists.
    "tokenize_non_ascii": ("POST", "/tokenize", {"content": "café in 東京, with a 🦙", "with_pieces": True, "add_special": False}),
    "detokenize": ("POST", "/detokenize", {"tokens": None}),  # filled from tokenize_paris
    # Pinned: greedy, fixed seed, no prompt cache, so a re-recording asks the same question.
    "completion_logprobs": ("POST", "/completion", {"prompt": "The capital of France is", "n_predict": 1, "n_probs": 8,
                                                    "temperature": 0, "seed": 42, "cache_prompt": False, "post_sampling_probs": False}),
    "completion_post_sampling": ("POST", "/completion", {"prompt": "The cat sat on the", "n_predict": 1, "n_probs": 8,
                                                         "temperature": 1.0, "top_k": 5, "seed": 42, "cache_prompt": False,
                                                         "post_sampling_probs": True, "samplers": ["top_k", "temperature"]}),
    "completion_decode": ("POST", "/completion", {"prompt": "def fibonacci(n):\n    if n", "n_predict": 16,
                                                  "temperature": 0, "seed": 42, "cache_prompt": False, "ignore_eos": True}),
    "metrics": ("GET", "/metrics", None),
}


def main() -> int:
    model = ensure_model(SYNTHETIC_DEFAULT)
    port = process.free_port()
    started = process.start_server(model, ["--port", str(port)])
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        with httpx.Client(base_url=started.url, timeout=120) as http:
            paris_ids: list[int] = []
            for name, (method, path, body) in REQUESTS.items():
                if name == "detokenize":
                    body = {"tokens": paris_ids}
                resp = http.request(method, path, json=body)
                entry = {"request": {"method": method, "path": path, "json": body}, "status": resp.status_code}
                try:
                    entry["response"] = resp.json()
                except ValueError:
                    entry["response_text"] = resp.text
                if name == "tokenize_paris":
                    paris_ids = [t["id"] for t in resp.json()["tokens"]]
                (OUT / f"{name}.json").write_text(json.dumps(entry, indent=2, ensure_ascii=False) + "\n")
                print(f"recorded {name}: HTTP {resp.status_code}")
    finally:
        process.stop_server(port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
