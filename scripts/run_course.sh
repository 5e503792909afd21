#!/usr/bin/env bash
# Start a server on the default model, run every lesson into outputs/<today>/, stop the server
# (also on failure or Ctrl-C). Used by `make run`.
#   scripts/run_course.sh [--port N] [--model NAME|FILE.gguf] [bytesup run-all options…]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
port=8099
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) break ;;
  esac
done
py="$root/.venv/bin/python"
# The run's server is the embedded engine (or $LLAMA_SERVER when set), even where the native
# build of scripts/build_llama_server.sh is cached: lesson 9 starts its own servers on that build.
export BYTESUP_ENGINE="${BYTESUP_ENGINE:-embedded}"

scripts/start_server.sh ${model:+"$model"} --port "$port"
trap 'scripts/stop_server.sh --port "$port" >/dev/null' EXIT INT TERM
"$py" -m bytesup server status --port "$port"
"$py" -m bytesup run-all --server "http://127.0.0.1:$port" --report "$@"
