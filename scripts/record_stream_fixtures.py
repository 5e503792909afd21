"""Record the streamed /completion answers the streaming tests parse, from the real embedded engine.

    .venv/bin/python scripts/record_stream_fixtures.py

Starts the embedded engine (BYTESUP_ENGINE=embedded) on the default model (SmolLM2-135M Q4_1, fetched
the first time) on a free port, and asks each prompt below twice with the same pinned settings
(greedy, fixed seed, no prompt cache, ignore_eos): once streamed (`stream: true`), once not. Each
answer goes through bytesup's own recording transport, so the streamed one is stored as a run
folder stores it (every event's text with its arrival time on the client's clock). Writes
tests/fixtures/server/stream_<name>.json as {"streamed": <exchange>, "plain": <exchange>}.
The synthetic models would not do: only a real tokenizer splits an emoji over several tokens.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from bytesup.llama import process
from bytesup.llama.client import LlamaServer
from bytesup.models.catalog import DEFAULT_MODEL, ensure_model
from bytesup.llama.recording import RecordingTransport

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "server"
PINNED = {"temperature": 0, "seed": 42, "cache_prompt": False, "ignore_eos": True}
PROMPTS = {
    # An English prompt: one event per token, each with its candidates (n_probs 1).
    "cat": ("The cat sat on the", {"n_predict": 16, "n_probs": 1}),
    # Each 🦙 is three tokens whose bytes end mid-character until the third: the server holds them back.
    "llama_emoji": ("🦙🦙🦙🦙🦙", {"n_predict": 8, "n_probs": 1}),
}


def main() -> int:
    os.environ["BYTESUP_ENGINE"] = "embedded"
    model = ensure_model(DEFAULT_MODEL)
    port = process.free_port()
    started = process.start_server(model, ["--port", str(port)])
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        for name, (prompt, settings) in PROMPTS.items():
            sink: list[dict] = []
            with LlamaServer(started.url, transport=RecordingTransport(sink)) as server:
                server.completion_stream(prompt, **PINNED, **settings)
                server.completion(prompt, **PINNED, **settings)
            entry = {"streamed": sink[0], "plain": sink[1]}
            (OUT / f"stream_{name}.json").write_text(json.dumps(entry, indent=2, ensure_ascii=False) + "\n")
            print(f"recorded stream_{name}: {len(sink[0]['stream'])} events")
    finally:
        process.stop_server(port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
