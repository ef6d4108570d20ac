#!/usr/bin/env bash
# device-prep — fill devcarry/ (git-ignored) for tests/cuda/run-on-gpu.sh:
# the binaries built here (build/ or $BUILD, configured with CUDA), the non-system
# shared libraries ldd lists (the GPU machine has no libmicrohttpd, jansson
# or libuv), and a copy of the ../shared files the GPU tests read, laid out
# as ../shared is (INFERD_SHARED points at it there). The device tool
# carries at most 64 MiB: MODELS picks the models (default: all but
# tiny-qwen2, 39 MB; MODELS=all takes every one).
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${MODELS:-"stories260K tiny-llama-Q4_K_M tiny-llama-mixed"}
[ "$models" = all ] && models="stories260K tiny-llama-Q4_K_M tiny-llama-mixed tiny-qwen2-Q4_K_M"
rm -rf devcarry && mkdir -p devcarry/lib devcarry/bin devcarry/shared/models \
    devcarry/shared/reference devcarry/shared/vocab
# BUILD: the build directory (default build/; one configured with
# -Dgpu_arch=90 gives binaries half the size of the 90,121 fat ones)
bd=${BUILD:-build}
bins="$bd/daemon/inferd $bd/tests/cuda/test_cuda $bd/tests/cuda/test_cuda_ops
      $bd/tests/cuda/test_cuda_model $bd/tests/cuda/test_cuda_sample"
cp $bins devcarry/bin/
# the pipelines' marks tool where the build made it (bench/mmq_trace.cu)
[ -x $bd/bench/mmq_trace ] && cp $bd/bench/mmq_trace devcarry/bin/
# symbols off: the tool carries 64 MiB, and the fat binaries' debug info is
# most of each file
strip devcarry/bin/*
# (a binary with only system libraries, mmq_trace's static cudart, leaves
# grep nothing to pass: its exit 1 is not a failure)
for b in devcarry/bin/*; do
    ldd "$b" | awk '/=> \// {print $3}' |
        { grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' || true; } |
        { grep -v -E 'libstdc\+\+|libgcc_s' || true; } | xargs -r -I{} cp -L {} devcarry/lib/
done
for m in $models; do
    cp ../shared/models/$m.gguf devcarry/shared/models/
    cp ../shared/reference/$m.json devcarry/shared/reference/
done
cp ../shared/reference/prompts-*.json devcarry/shared/reference/
cp ../shared/vocab/ggml-vocab-qwen2.gguf ../shared/vocab/ggml-vocab-llama-spm.gguf* devcarry/shared/vocab/
du -sh devcarry
# the carry as one gzip (fat binaries compress ~2.3x): carry devcarry.tgz
# and start the device command with `tar xzf devcarry.tgz`
tar czf devcarry.tgz devcarry
du -sh devcarry.tgz
