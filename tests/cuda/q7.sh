# tests/cuda/q7.sh — sourced by the device scripts (tests/cuda/run-on-gpu.sh,
# bench/ab-call.sh, bench/mmd-call.sh): q7_make LOG makes the 7B-shaped
# Q4_K_M (`inferd mkmodel --preset qwen2.5-7b`, random weights) at
# /tmp/q7.gguf unless a warm machine kept it, and lays out test_cuda_model's
# GPU-vs-CPU gate on it (tests/cuda/q7-gpu-vs-cpu.json) in devcarry's
# shared/. Needs d (devcarry) and the repository root as the directory.
q7_make() {
    [ -s /tmp/q7.gguf ] || timeout 100 $d/bin/inferd mkmodel --preset qwen2.5-7b --quant q4_k_m \
        --vocab $d/shared/vocab/ggml-vocab-qwen2.gguf --out /tmp/q7.gguf > "${1:-/dev/null}" 2>&1
    cp tests/cuda/q7-gpu-vs-cpu.json $d/shared/reference/ && ln -sf /tmp/q7.gguf $d/shared/models/q7.gguf
}
