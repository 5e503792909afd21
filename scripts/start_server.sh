#!/usr/bin/env bash
# Start a llama.cpp server for the lessons and wait until it answers /health.
#   scripts/start_server.sh [MODEL.gguf] [llama-server flags…]
#   scripts/start_server.sh MODEL.gguf --rpc 127.0.0.1:50061,127.0.0.1:50062    (layers split across rpc-servers)
# Defaults: --host 127.0.0.1 --port 8099 -c 2048 -ngl 99 --parallel 1 --metrics (flags given replace them).
# Engine: $LLAMA_SERVER, else the native build of scripts/build_llama_server.sh when it is cached
# (BYTESUP_ENGINE=embedded skips it), else llama-server on PATH, else llama.cpp embedded through xllamacpp.
# --rpc needs a native llama-server (the embedded engine has no RPC); `bytesup server start-rpc` starts rpc-servers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/find_python.sh"
find_bytesup_python "$root" || exit 1
exec "$py" -m bytesup.llama.rpc serve "$@"
