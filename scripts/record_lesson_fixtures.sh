#!/usr/bin/env bash
# Re-record the lessons' test fixtures from the real embedded engine on the default model (SmolLM2-135M Q4_1);
# lesson 9 (a model split across rpc-servers) from the native build, which it needs.
#   scripts/record_lesson_fixtures.sh [LESSON_ID…]     (default: every lesson)
# Each lesson is recorded into tests/fixtures/runs/<id>/ with --repeat 2 (small files, same code path).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="$root/.venv/bin/python"
port="${PORT:-$("$py" -c 'from bytesup.llama.process import free_port; print(free_port())')}"
ids=("$@")
if [ ${#ids[@]} -eq 0 ]; then
  mapfile -t ids < <(ls lessons | sed -n 's/^\([0-9][0-9][a-z]\{0,1\}_[a-z0-9_]*\)\.py$/\1/p')
fi
"$py" -m bytesup model build >/dev/null
# The run's server stays the embedded engine even where the native build is cached; lesson 9 starts its own
# servers on the native build (scripts/build_llama_server.sh, built here first when it is missing).
if printf '%s\n' "${ids[@]}" | grep -q '^09_'; then bash scripts/build_llama_server.sh >/dev/null; fi
BYTESUP_ENGINE=embedded scripts/start_server.sh --port "$port" >/dev/null
trap 'scripts/stop_server.sh --port "$port" >/dev/null' EXIT INT TERM
for id in "${ids[@]}"; do
  rm -rf "tests/fixtures/runs/$id"
  "$py" -m bytesup run "$id" --server "http://127.0.0.1:$port" --out "tests/fixtures/runs/$id" --repeat 2
done
