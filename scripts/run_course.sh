#!/usr/bin/env bash
# Run every lesson into outputs/<today>/ on a server of the run's own (used by `make run`).
#   scripts/run_course.sh [--model NAME|FILE.gguf] [bytesup run-all options…]
# The run starts its server on a free port and stops it when it ends, however it ends: an error, Ctrl-C,
# SIGTERM to make or to this script, or make killed outright (the run gets SIGTERM when its parent dies,
# and the server when the run dies). The resume command it prints for an unfinished run is a `make run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --port) shift 2 ;;  # older make run PORT=…: the run's own server takes a free port
    *) break ;;
  esac
done
py="$root/.venv/bin/python"
# The run measures with the fastest engine that is ready: $LLAMA_SERVER when set, else the native build of
# scripts/build_llama_server.sh when it is cached and passed its smoke test on this CPU (`make native` or the first
# `make test` builds it), else the embedded engine. The run's first line says which, and why.
export BYTESUP_ENGINE="${BYTESUP_ENGINE:-fastest}"
if [ -n "$model" ]; then
  export BYTESUP_MODEL="$model"
fi
export BYTESUP_MAKE_RUN="make run${model:+ MODEL=$model}"
export BYTESUP_DIE_WITH_PARENT=1
exec "$py" -m bytesup run-all --own-server --report "$@"
