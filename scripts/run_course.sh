#!/usr/bin/env bash
# Start a server on the default model, run every lesson into outputs/<today>/, stop the server
# (also on failure or Ctrl-C). Used by `make run`.
#   scripts/run_course.sh [--port N] [bytesup run-all options…]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
port=8099
if [ "${1:-}" = "--port" ]; then port="$2"; shift 2; fi
py="$root/.venv/bin/python"

scripts/start_server.sh --port "$port"
trap 'scripts/stop_server.sh --port "$port" >/dev/null' EXIT INT TERM
"$py" -m bytesup server status --port "$port"
"$py" -m bytesup run-all --server "http://127.0.0.1:$port" --report "$@"
