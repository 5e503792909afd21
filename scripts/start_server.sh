#!/usr/bin/env bash
# Start a llama.cpp server for the lessons and wait until it answers /health.
#   scripts/start_server.sh [MODEL.gguf] [llama-server flags…]
# Defaults: --host 127.0.0.1 --port 8099 -c 2048 -ngl 99 --parallel 1 --metrics (flags given replace them).
# Engine: $LLAMA_SERVER, else llama-server on PATH, else llama.cpp embedded through xllamacpp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${BYTESUP_PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "error: $py not found. Run 'make install' (or 'make run') first to create the virtual environment." >&2
  exit 1
fi
exec "$py" -m bytesup.engine start "$@"
