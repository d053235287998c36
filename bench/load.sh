#!/usr/bin/env bash
# Load test of one gateway (issue: Caddy module, "Measured"): a `respond`
# route against the counter handle at 32 connections, and POST /executions
# for `async () => 1 + 1`. Loopback only; bounded in time. Usage:
#   bash bench/load.sh [seconds per target, default 10]
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
for _ in $(seq 50); do curl -sf -o /dev/null http://127.0.0.1:8089/ -H 'Host: respond.localhost' && break; sleep 0.2; done
id=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions \
	-d '{"retainHandles": true, "code": "async () => { let served = 0; return { fetch() { return Response.json({served: ++served}) } } }"}' \
	| sed -E 's/.*"executionId":"([^"]+)".*/\1/')
echo "counter handle: $id"
urlid=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions \
	-d '{"retainHandles": true, "code": "let served = 0; export default { fetch(request) { const id = new URL(request.url).searchParams.get(\"id\"); return Response.json({id, served: ++served}) } }"}' \
	| sed -E 's/.*"executionId":"([^"]+)".*/\1/')
"$work/loadgen" -label respond -url http://respond.localhost:8089/ -d "${secs}s" -c 32
"$work/loadgen" -label counter -url "http://$id.apps.localhost:8089/" -d "${secs}s" -c 32
"$work/loadgen" -label url-counter -url "http://$urlid.apps.localhost:8089/items?id=42&sort=asc" -d "${secs}s" -c 32
token=$("$work/retainer" retainer-token --sub alice --iss "" --aud "" --secret-env BENCH_SECRET)
"$work/loadgen" -label respond+jwt -url http://jwt.localhost:8089/ -auth "Bearer $token" -d "${secs}s" -c 32
"$work/loadgen" -label executions -method POST -url http://api.localhost:8089/executions \
	-body '{"code": "async () => 1 + 1"}' -d "${secs}s" -c 1
