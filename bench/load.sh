#!/bin/sh
# load.sh — HTTP load test of `inferd serve` with wrk: requests/s and latency
# percentiles of POST /v1/completions.
#
# usage: bench/load.sh [-u URL] [-m MODEL.gguf] [-b INFERD] [-c CONNS] [-t THREADS]
#                      [-d DURATION] [-n MAX_TOKENS] [-s] [-k API_KEY]
#   -u URL     a running daemon (e.g. http://127.0.0.1:8080); without it the
#              script starts one on a free port with -m (default
#              data/models/stories260K.gguf) and stops it afterwards
#   -s         streamed requests (SSE) instead of plain JSON
# Prints wrk's report plus one summary line:
#   load: rps=... p50_ms=... p90_ms=... p99_ms=... errors=...
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
url=""
model="$src/data/models/stories260K.gguf"
bin=""
conns=8
threads=2
duration=10s
max_tokens=16
stream=false
key="${INFERD_API_KEY:-}"

while getopts "u:m:b:c:t:d:n:sk:h" opt; do
    case $opt in
    u) url=$OPTARG ;;
    m) model=$OPTARG ;;
    b) bin=$OPTARG ;;
    c) conns=$OPTARG ;;
    t) threads=$OPTARG ;;
    d) duration=$OPTARG ;;
    n) max_tokens=$OPTARG ;;
    s) stream=true ;;
    k) key=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
    esac
done

command -v wrk >/dev/null 2>&1 || { echo "load.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

model_id=""
if [ -z "$url" ]; then
    if [ -z "$bin" ]; then
        for b in "$src"/build*/daemon/inferd; do
            [ -x "$b" ] && { bin=$b; break; }
        done
    fi
    [ -n "$bin" ] && [ -x "$bin" ] || { echo "load.sh: no inferd binary (use -b)" >&2; exit 1; }
    [ -f "$model" ] || { echo "load.sh: no model $model (use -m)" >&2; exit 1; }
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$bin" serve --model "$model" --host 127.0.0.1 --port "$port" --log-level warn \
        --max-connections-per-ip 1024 --max-connections 1024 --queue-len 1024 >"$tmp/daemon.log" 2>&1 &
    pid=$!
    url="http://127.0.0.1:$port"
    i=0
    until curl -sf "$url/health" >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "load.sh: daemon did not come up:" >&2
            cat "$tmp/daemon.log" >&2
            exit 1
        fi
        sleep 0.1
    done
fi

auth=""
[ -n "$key" ] && auth="Bearer $key"
model_id=$(curl -sf ${auth:+-H "Authorization: $auth"} "$url/v1/models" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

cat >"$tmp/post.lua" <<LUA
-- wrk script: one POST /v1/completions per request, status counted
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local auth = "$auth"
if auth ~= "" then wrk.headers["Authorization"] = auth end
wrk.body = '{"model":"$model_id","prompt":"Once upon a time","max_tokens":$max_tokens,"temperature":0,"ignore_eos":true,"stream":$stream}'

local bad = 0
response = function(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end

done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
               + summary.errors.status + summary.errors.timeout
  io.write(string.format("load: rps=%.1f p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.requests, errors))
end
LUA

echo "load.sh: wrk -t$threads -c$conns -d$duration $url/v1/completions (max_tokens $max_tokens, stream $stream)"
wrk -t"$threads" -c"$conns" -d"$duration" --latency -s "$tmp/post.lua" "$url/v1/completions"
