#!/usr/bin/env bash
# SQL at handler speed (issue 58, docs/sql.md): the trivial handler, a
# handler answering a primary-key SELECT, and a handler doing one INSERT a
# request (each its own commit, synchronous=FULL), at 32 connections, in
# one gateway; rounds interleave the targets, ratios at the end.
# Loopback only.
# Usage: bash bench/sql.sh [seconds per target, default 10] [rounds, default 1]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-1}
source bench/lib.sh
start_gateway
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
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label trivial -url "http://$trivial.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label pk-select -url "http://$sel.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label insert -url "http://$ins.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label pk-select-c8 -url "http://$sel8.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label insert-c8 -url "http://$ins8.apps.localhost:8089/" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 bench/summary.py "$results" pk-select/trivial insert/trivial pk-select-c8/trivial insert-c8/trivial
rows=$(curl -s -H 'Host: api.localhost' http://127.0.0.1:8089/sql -d '{"sql": "SELECT count(*) AS n FROM hits"}')
echo "rows inserted: $rows"
