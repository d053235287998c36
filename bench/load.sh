#!/usr/bin/env bash
# Load test of one gateway (issue: Caddy module, "Measured"): a `respond`
# route against the counter handle at 32 connections, and POST /executions
# for `async () => 1 + 1`. Loopback only; bounded in time. Usage:
#   bash bench/load.sh [seconds per target, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
source bench/lib.sh
start_gateway
id=$(deploy '{"retainHandles": true, "code": "async () => { let served = 0; return { fetch() { return Response.json({served: ++served}) } } }"}')
echo "counter handle: $id"
urlid=$(deploy '{"retainHandles": true, "code": "let served = 0; export default { fetch(request) { const id = new URL(request.url).searchParams.get(\"id\"); return Response.json({id, served: ++served}) } }"}')
"$work/loadgen" -label respond -url http://respond.localhost:8089/ -d "${secs}s" -c 32
"$work/loadgen" -label counter -url "http://$id.apps.localhost:8089/" -d "${secs}s" -c 32
"$work/loadgen" -label url-counter -url "http://$urlid.apps.localhost:8089/items?id=42&sort=asc" -d "${secs}s" -c 32
token=$("$work/retainer" retainer-token --sub alice --iss "" --aud "" --secret-env BENCH_SECRET)
"$work/loadgen" -label respond+jwt -url http://jwt.localhost:8089/ -auth "Bearer $token" -d "${secs}s" -c 32
"$work/loadgen" -label executions -method POST -url http://api.localhost:8089/executions \
	-body '{"code": "async () => 1 + 1"}' -d "${secs}s" -c 1
