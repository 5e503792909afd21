#!/usr/bin/env bash
# Stop the server that scripts/start_server.sh started (by its pid file; nothing else is touched).
#   scripts/stop_server.sh [--port N]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${BYTESUP_PYTHON:-$root/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "error: $py not found. Run 'make install' first." >&2
  exit 1
fi
exec "$py" -m bytesup.engine stop "$@"
