#!/usr/bin/env bash
# Handles that await (issue 20): a handler that awaits 100 ms, at 32
# connections, one at a time (the default) and with `concurrency: 64`.
# Loopback only. Usage: bash bench/concurrency.sh [seconds, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
source bench/lib.sh
start_gateway
code='export default { async fetch() { await new Promise(r => setTimeout(r, 100)); return new Response(\"ok\") } }'
serial=$(deploy "{\"retainHandles\": true, \"timeoutMs\": 5000, \"code\": \"$code\"}")
conc=$(deploy "{\"retainHandles\": true, \"timeoutMs\": 5000, \"concurrency\": 64, \"code\": \"$code\"}")
"$work/loadgen" -label "await 100ms, concurrency 1" -url "http://$serial.apps.localhost:8089/" -d "${secs}s" -c 32 || true
"$work/loadgen" -label "await 100ms, concurrency 64" -url "http://$conc.apps.localhost:8089/" -d "${secs}s" -c 32
