#!/usr/bin/env bash
# Handles that await (issue 20): a handler that awaits 100 ms, at 32
# connections, one at a time (the default) and with `concurrency: 64`.
# Loopback only. Usage: bash bench/concurrency.sh [seconds, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
work=$(mktemp -d)
trap 'kill $gw 2>/dev/null || true; wait $gw 2>/dev/null || true; rm -rf "$work"' EXIT
CGO_ENABLED=1 go build -o "$work/retainer" ./cmd/retainer
go build -o "$work/loadgen" ./bench/loadgen
export BENCH_SECRET="bench-secret-bench-secret-bench-secret"
BENCH_STORE="$work/registry.db" XDG_DATA_HOME="$work" XDG_CONFIG_HOME="$work" \
	"$work/retainer" run --config bench/Caddyfile.bench > "$work/gateway.log" 2>&1 &
gw=$!
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8089/ -H 'Host: respond.localhost' && break; sleep 0.2; done
code='export default { async fetch() { await new Promise(r => setTimeout(r, 100)); return new Response(\"ok\") } }'
deploy() {
	curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions -d "$1" | sed -E 's/.*"executionId":"([^"]+)".*/\1/'
}
serial=$(deploy "{\"retainHandles\": true, \"timeoutMs\": 5000, \"code\": \"$code\"}")
conc=$(deploy "{\"retainHandles\": true, \"timeoutMs\": 5000, \"concurrency\": 64, \"code\": \"$code\"}")
"$work/loadgen" -label "await 100ms, concurrency 1" -url "http://$serial.apps.localhost:8089/" -d "${secs}s" -c 32 || true
"$work/loadgen" -label "await 100ms, concurrency 64" -url "http://$conc.apps.localhost:8089/" -d "${secs}s" -c 32
