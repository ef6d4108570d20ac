#!/usr/bin/env bash
# demo — start the daemon on the default model and serve one completion.
#   ./tools/demo.sh [MODEL.gguf]         (PORT=8080 by default)
# Default model: ../shared/models/stories260K.gguf, a real 260K-parameter
# Llama trained on TinyStories (it writes little stories). Without ../shared,
# a random-weight tiny Llama is generated with `inferd mkmodel` (it needs a
# vocab GGUF: pass VOCAB=...; its output is gibberish, it only shows the path).
# The daemon keeps running in the foreground afterwards; Ctrl-C stops it
# (SIGINT drains and exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/daemon/inferd
[ -x "$bin" ] || ./tools/bootstrap.sh
port=${PORT:-8080}
model=${1:-../shared/models/stories260K.gguf}
if [ ! -f "$model" ]; then
    vocab=${VOCAB:-../shared/vocab/ggml-vocab-llama-spm.gguf}
    model=build/demo-tiny-llama.gguf
    echo "demo: no default model; generating a random-weight tiny Llama ($model)"
    "$bin" mkmodel --preset tiny-llama --quant q8_0 --vocab "$vocab" --out "$model"
fi
id=$(basename "$model" .gguf)

"$bin" serve --model "$model" --port "$port" &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid' INT TERM
for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    kill -0 $pid 2>/dev/null || { echo "demo: the daemon exited" >&2; exit 1; }
    sleep 0.1
done
echo "demo: POST /v1/completions"
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$id\",\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0}"
echo
echo "demo: the daemon (pid $pid) keeps serving on 127.0.0.1:$port; Ctrl-C stops it"
wait $pid
