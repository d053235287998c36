#!/usr/bin/env bash
# kv at handler speed (issue 19): the trivial counter, a kv.get handle, the
# kv read-modify-write counter, and 32 kv counters at once (one handle and
# key each), at 32 connections, in one gateway; beside them the same
# counter as a workerd Durable Object (bench/workerd/kvcounter.js, in
# workerd's local SQLite storage, pinned in bench/workerd/package.json):
# one object, then 32 objects. Rounds interleave the targets; req/s, p50
# and p99 are averaged over them and the ratios printed at the end.
# Loopback only.
# Usage: bash bench/kv.sh [seconds per target, default 10] [rounds, default 1]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-1}
source bench/lib.sh
install_workerd
start_gateway
mkdir -p "$work/do-disk"
(cd bench/workerd && exec ./node_modules/.bin/workerd serve kv.capnp --directory-path "do-disk=$work/do-disk") > "$work/workerd.log" 2>&1 &
wd=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:8099/?n=warm" && break; sleep 0.2; done
trivial=$(deploy '{"retainHandles": true, "code": "let s = 0; export default { fetch() { return Response.json({served: ++s}) } }"}')
get=$(deploy '{"retainHandles": true, "capabilities": ["kvRead"], "code": "export default { async fetch(r, env) { return Response.json({c: await env.kv.get(\"c\")}) } }"}')
counter='{"retainHandles": true, "capabilities": ["kvRead", "kvWrite"], "code": "export default { async fetch(r, env) { const n = Number(await env.kv.get(\"c\") || 0) + 1; await env.kv.put(\"c\", String(n)); return Response.json({n}) } }"}'
kv=$(deploy "$counter")
many=""
objects=""
for i in $(seq 32); do
	c=$(echo "$counter" | sed "s/\\\\\"c\\\\\"/\\\\\"c$i\\\\\"/g")
	many="$many${many:+,}http://$(deploy "$c").apps.localhost:8089/"
	objects="$objects${objects:+,}http://127.0.0.1:8099/?n=c$i"
done
# The same answer from both counters, or the comparison means nothing.
a=$(curl -s "http://127.0.0.1:8089/" -H "Host: $kv.apps.localhost"); b=$(curl -s "http://127.0.0.1:8099/?n=c")
[ "$a" = '{"n":1}' ] && [ "$b" = '{"n":1}' ] || { echo "the counters differ: $a $b" >&2; exit 1; }
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label kv.get -url "http://$get.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label kv-counter -url "http://$kv.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label 32-counters -url "$many" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-object -addr 127.0.0.1:8099 -url "http://127.0.0.1:8099/?n=c" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-32-objects -addr 127.0.0.1:8099 -url "$objects" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 bench/summary.py "$results" kv.get/trivial kv-counter/trivial 32-counters/kv-counter \
	kv-counter/workerd-object 32-counters/workerd-32-objects workerd-32-objects/workerd-object
final=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/executions -d '{"capabilities": ["kvRead"], "code": "async () => kv.get(\"c\")"}')
echo "the counter after the run: $final"
