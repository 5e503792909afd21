# Sourced by start_server.sh and stop_server.sh: sets $py to a Python that can import bytesup.
# Looks in order at $BYTESUP_PYTHON, the activated virtual environment ($VIRTUAL_ENV), this
# checkout's .venv, the interpreter of a `bytesup` command on PATH (pipx, pip --user), python3.
find_bytesup_python() {
  local root="$1" candidate exe
  local candidates=()
  [ -n "${BYTESUP_PYTHON:-}" ] && candidates+=("$BYTESUP_PYTHON")
  [ -n "${VIRTUAL_ENV:-}" ] && candidates+=("$VIRTUAL_ENV/bin/python")
  candidates+=("$root/.venv/bin/python")
  exe="$(command -v bytesup 2>/dev/null || true)"
  if [ -n "$exe" ] && head -c 2 "$exe" 2>/dev/null | grep -q '#!'; then
    candidates+=("$(head -n 1 "$exe" | sed 's/^#![[:space:]]*//; s/[[:space:]].*$//')")
  fi
  candidates+=("$(command -v python3 2>/dev/null || true)")
  for candidate in "${candidates[@]}"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import bytesup' 2>/dev/null; then
      py="$candidate"
      return 0
    fi
  done
  echo "error: no Python with bytesup installed was found (looked at \$BYTESUP_PYTHON, \$VIRTUAL_ENV," \
       "$root/.venv, the 'bytesup' command on PATH and python3). Run 'make install' here, activate the" \
       "virtual environment that has bytesup, or set BYTESUP_PYTHON=/path/to/python." >&2
  return 1
}
