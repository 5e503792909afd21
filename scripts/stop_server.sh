#!/usr/bin/env bash
# Stop the server that scripts/start_server.sh started (by its pid file; nothing else is touched),
# then the rpc-servers on loopback named in its --rpc that bytesup started (`bytesup server start-rpc`).
#   scripts/stop_server.sh [--port N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/find_python.sh"
find_bytesup_python "$root" || exit 1
exec "$py" -m bytesup.llama.rpc stop "$@"
