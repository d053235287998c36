#!/usr/bin/env bash
# kv at handler speed (issue 19): the trivial counter, a kv.get handle, the
# kv read-modify-write counter, and 32 kv counters at once, at 32
# connections, in one gateway and one run. Loopback only.
# Usage: bash bench/kv.sh [seconds per target, default 10]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
source bench/lib.sh
start_gateway
trivial=$(deploy '{"retainHandles": true, "code": "let s = 0; export default { fetch() { return Response.json({served: ++s}) } }"}')
get=$(deploy '{"retainHandles": true, "capabilities": ["kvRead"], "code": "export default { async fetch(r, env) { return Response.json({c: await env.kv.get(\"c\")}) } }"}')
counter='{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": "export default { async fetch(r, env) { const n = Number(await env.kv.get(\"c\") || 0) + 1; await env.kv.put(\"c\", String(n)); return Response.json({n}) } }"}'
kv=$(deploy "$counter")
many=""
for i in $(seq 32); do
	c=$(echo "$counter" | sed "s/\\\\\"c\\\\\"/\\\\\"c$i\\\\\"/g")
	many="$many${many:+,}http://$(deploy "$c").apps.localhost:8089/"
done
"$work/loadgen" -label trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32
"$work/loadgen" -label kv.get -url "http://$get.apps.localhost:8089/" -d "${secs}s" -c 32
"$work/loadgen" -label kv-counter -url "http://$kv.apps.localhost:8089/" -d "${secs}s" -c 32
"$work/loadgen" -label "32 counters" -url "$many" -d "${secs}s" -c 32
final=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions -d '{"capabilities": ["kvRead"], "code": "async () => kv.get(\"c\")"}')
echo "the counter after the run: $final"
