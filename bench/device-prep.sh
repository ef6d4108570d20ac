#!/usr/bin/env bash
# device-prep — fill devcarry/ (git-ignored) for bench/device-run.sh: the built
# inferd and test_cuda, the non-system shared libraries ldd lists (the GPU
# machine has no libmicrohttpd/jansson/libuv), and two small model files.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf devcarry && mkdir -p devcarry/lib
cp build/daemon/inferd build/tests/cuda/test_cuda devcarry/
for b in devcarry/inferd devcarry/test_cuda; do
    ldd "$b" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        grep -v -E 'libstdc\+\+|libgcc_s' | xargs -r -I{} cp -L {} devcarry/lib/
done
cp ../shared/vocab/ggml-vocab-qwen2.gguf ../shared/models/tiny-llama-Q4_K_M.gguf devcarry/
du -sh devcarry
