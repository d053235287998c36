#!/usr/bin/env bash
# SQL at handler speed (issue 58, docs/sql.md): the trivial handler, a
# handler answering a primary-key SELECT, and a handler doing one INSERT a
# request (each its own commit, synchronous=FULL), at 32 connections, in
# one gateway; beside them the same two handlers and the trivial one on
# Deno with node:sqlite (bench/workerd/sqlite.js, WAL and synchronous=FULL
# too; one thread, as a handle). Rounds interleave the targets, ratios at
# the end.
# Loopback only.
# Usage: bash bench/sql.sh [seconds per target, default 10] [rounds, default 1]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-1}
source bench/lib.sh
install_workerd
start_gateway
deno=bench/workerd/node_modules/.bin/deno
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8093 bench/workerd/trivial.js > "$work/deno-trivial.log" 2>&1 &
dt=$!
SQL_BENCH_DB="$work/deno.sqlite" DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --allow-env --allow-read --allow-write --port 8094 bench/workerd/sqlite.js > "$work/deno-sql.log" 2>&1 &
ds=$!
trap 'kill ${gw:-} ${dt:-} ${ds:-} 2>/dev/null || true; wait ${gw:-} ${dt:-} ${ds:-} 2>/dev/null || true; rm -rf "$work"' EXIT
for port in 8093 8094; do
	for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
done
trivial=$(deploy '{"retainHandles": true, "code": "let s = 0; export default { fetch() { return Response.json({served: ++s}) } }"}')
curl -sf -H 'Host: api.localhost' http://127.0.0.1:8089/executions -d '{"capabilities": ["sqlWrite"], "code": "async () => db.exec(\"CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL); WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) INSERT INTO items SELECT x, \u0027item \u0027 || x, x * 1.5 FROM c; CREATE TABLE hits (id INTEGER PRIMARY KEY, at INTEGER)\")"}' > /dev/null
sel=$(deploy '{"retainHandles": true, "capabilities": ["sqlRead"], "code": "let n = 0; export default { async fetch(r, env) { n = n % 1000 + 1; return Response.json(await env.db.prepare(\"SELECT * FROM items WHERE id = ?\").bind(n).first()) } }"}')
ins=$(deploy '{"retainHandles": true, "capabilities": ["sqlWrite"], "code": "export default { async fetch(r, env) { const {meta} = await env.db.prepare(\"INSERT INTO hits (at) VALUES (?)\").bind(Date.now()).run(); return Response.json({id: meta.last_row_id}) } }"}')
# The same two with concurrency 8: a handler's invocations overlap their
# round trips to the gateway (README.md, concurrency).
sel8=$(deploy '{"retainHandles": true, "concurrency": 8, "capabilities": ["sqlRead"], "code": "let n = 0; export default { async fetch(r, env) { n = n % 1000 + 1; return Response.json(await env.db.prepare(\"SELECT * FROM items WHERE id = ?\").bind(n).first()) } }"}')
ins8=$(deploy '{"retainHandles": true, "concurrency": 8, "capabilities": ["sqlWrite"], "code": "export default { async fetch(r, env) { const {meta} = await env.db.prepare(\"INSERT INTO hits (at) VALUES (?)\").bind(Date.now()).run(); return Response.json({id: meta.last_row_id}) } }"}')
a=$(curl -s "http://127.0.0.1:8089/" -H "Host: $sel.apps.localhost")
[ "$a" = '{"id":1,"name":"item 1","price":1.5}' ] || { echo "the SELECT handler answered: $a" >&2; exit 1; }
b=$(curl -s "http://127.0.0.1:8094/")
[ "$b" = '{"id":2,"name":"item 2","price":3}' ] || { echo "Deno's SELECT handler answered: $b" >&2; exit 1; }
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label pk-select -url "http://$sel.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label insert -url "http://$ins.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label pk-select-c8 -url "http://$sel8.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label insert-c8 -url "http://$ins8.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-trivial -addr 127.0.0.1:8093 -url "http://127.0.0.1:8093/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-select -addr 127.0.0.1:8094 -url "http://127.0.0.1:8094/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-insert -addr 127.0.0.1:8094 -url "http://127.0.0.1:8094/insert" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 bench/summary.py "$results" pk-select/trivial insert/trivial pk-select-c8/trivial insert-c8/trivial \
	deno-select/deno-trivial deno-insert/deno-trivial pk-select-c8/deno-select insert-c8/deno-insert
rows=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/sql -d '{"sql": "SELECT count(*) AS n FROM hits"}')
echo "rows inserted: $rows"
