#!/usr/bin/env bash
# demo — start the daemon on the default model and serve one completion.
#   ./tools/demo.sh [MODEL.gguf]         (PORT=8080 by default)
# Default model: data/models/stories260K.gguf (in the repository), a real
# 260K-parameter Llama trained on TinyStories (it writes little stories;
# provenance in data/README.md).
# The daemon keeps running in the foreground afterwards; Ctrl-C stops it
# (SIGINT drains and exits 0). A port already in use is refused with one line
# saying so: PORT=8081 ./tools/demo.sh picks another.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/daemon/inferd
[ -x "$bin" ] || ./tools/bootstrap.sh
port=${PORT:-8080}
model=${1:-data/models/stories260K.gguf}
id=$(basename "$model" .gguf)

# Something already answering there would pass the health check below.
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "demo: port in use: 127.0.0.1:$port already accepts connections; stop that server or run PORT=8081 $0" >&2
    exit 1
fi
"$bin" serve --model "$model" --port "$port" &
pid=$!
# Ctrl-C: the daemon drains, and the script exits with its status (0), not
# with the interrupted wait's 130
trap 'kill -INT $pid 2>/dev/null; wait $pid; exit $?' INT TERM
for _ in $(seq 1 100); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 $pid 2>/dev/null; then
        rc=0; wait $pid || rc=$?
        echo "demo: the daemon exited with status $rc (its message is above)" >&2
        exit 1
    fi
    sleep 0.1
done
echo "demo: POST /v1/completions"
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$id\",\"prompt\":\"Once upon a time\",\"max_tokens\":48,\"temperature\":0}"
echo
echo "demo: the daemon (pid $pid) keeps serving on 127.0.0.1:$port; Ctrl-C stops it"
wait $pid
