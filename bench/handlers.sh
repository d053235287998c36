#!/usr/bin/env bash
# Real handlers side by side (issue 13): a page rendered on every request
# (bench/workerd/page.js: ~6 KB of HTML, the query echoed escaped), a
# JSON API reading a 2.2 KB body (bench/workerd/post.js) and a webhook
# receiver that checks a 3.8 KB body's HMAC-SHA256 before it parses it
# (bench/workerd/webhook.js), each served by a Retainer handle, by workerd
# and by Deno (pinned in
# bench/workerd/package.json), at 32 connections, in interleaved rounds;
# req/s, p50 and p99 averaged over the rounds, and the ratios, at the end.
# Loopback only.
# Usage: bash bench/handlers.sh [seconds per target, default 8] [rounds, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
rounds=${2:-2}
source bench/lib.sh
install_workerd
start_gateway
(cd bench/workerd && exec ./node_modules/.bin/workerd serve config.capnp) > "$work/workerd.log" 2>&1 &
wd=$!
deno=bench/workerd/node_modules/.bin/deno
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8097 bench/workerd/page.js > "$work/deno-page.log" 2>&1 &
dp=$!
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8098 bench/workerd/post.js > "$work/deno-post.log" 2>&1 &
dq=$!
DENO_DIR="$work/deno" DENO_NO_UPDATE_CHECK=1 "$deno" serve --quiet --port 8101 bench/workerd/webhook.js > "$work/deno-webhook.log" 2>&1 &
dh=$!
trap 'kill ${gw:-} ${wd:-} ${dp:-} ${dq:-} ${dh:-} 2>/dev/null || true; wait ${gw:-} ${wd:-} ${dp:-} ${dq:-} ${dh:-} 2>/dev/null || true; rm -rf "$work"' EXIT
for port in 8095 8097; do
	for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
done
body=$(python3 -c 'import json; print(json.dumps([{"id": i, "name": "item %d" % i, "price": i * 1.5, "tags": ["a", "b"]} for i in range(40)], separators=(",", ":")))')
for port in 8096 8098; do
	for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" -d "$body" && break; sleep 0.2; done
done
# The webhook's event, and its signature under the secret webhook.js holds.
hook=$(python3 -c 'import json; print(json.dumps({"id": "evt_1", "type": "order.paid", "items": [{"sku": "sku-%d" % i, "name": "Item número %d" % i, "qty": i % 3 + 1, "price": i * 1.25} for i in range(60)]}, separators=(",", ":"), ensure_ascii=False))')
sig=$(printf '%s' "$hook" | python3 -c 'import hmac, hashlib, sys; print(hmac.new(b"webhook-secret", sys.stdin.buffer.read(), hashlib.sha256).hexdigest())')
for port in 8100 8101; do
	for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/" -H "x-signature: $sig" -d "$hook" && break; sleep 0.2; done
done
page=$(deploy "$(handle_json bench/workerd/page.js)")
post=$(deploy "$(handle_json bench/workerd/post.js)")
webhook=$(deploy "$(handle_json bench/workerd/webhook.js)")
# The same answers from all three, or the comparison means nothing.
a=$(curl -s "http://127.0.0.1:8089/?q=%3Cb%3E" -H "Host: $page.apps.localhost"); b=$(curl -s "http://127.0.0.1:8095/?q=%3Cb%3E"); c=$(curl -s "http://127.0.0.1:8097/?q=%3Cb%3E")
[ "$a" = "$b" ] && [ "$b" = "$c" ] || { echo "the page differs between the three" >&2; exit 1; }
a=$(curl -s "http://127.0.0.1:8089/" -H "Host: $post.apps.localhost" -d "$body"); b=$(curl -s "http://127.0.0.1:8096/" -d "$body"); c=$(curl -s "http://127.0.0.1:8098/" -d "$body")
[ "$a" = "$b" ] && [ "$b" = "$c" ] || { echo "the JSON API differs between the three: $a $b $c" >&2; exit 1; }
a=$(curl -s "http://127.0.0.1:8089/" -H "Host: $webhook.apps.localhost" -H "x-signature: $sig" -d "$hook"); b=$(curl -s "http://127.0.0.1:8100/" -H "x-signature: $sig" -d "$hook"); c=$(curl -s "http://127.0.0.1:8101/" -H "x-signature: $sig" -d "$hook")
[ "$a" = '{"ok":true,"id":"evt_1","items":60}' ] && [ "$a" = "$b" ] && [ "$b" = "$c" ] || { echo "the webhook differs between the three: $a $b $c" >&2; exit 1; }
results="$work/results"
for r in $(seq "$rounds"); do
	"$work/loadgen" -label retainer-page -url "http://$page.apps.localhost:8089/?q=shoes" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-page -addr 127.0.0.1:8095 -url "http://127.0.0.1:8095/?q=shoes" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-page -addr 127.0.0.1:8097 -url "http://127.0.0.1:8097/?q=shoes" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-post -url "http://$post.apps.localhost:8089/" -method POST -body "$body" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-post -addr 127.0.0.1:8096 -url "http://127.0.0.1:8096/" -method POST -body "$body" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-post -addr 127.0.0.1:8098 -url "http://127.0.0.1:8098/" -method POST -body "$body" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label retainer-webhook -url "http://$webhook.apps.localhost:8089/" -method POST -body "$hook" -H "x-signature: $sig" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label workerd-webhook -addr 127.0.0.1:8100 -url "http://127.0.0.1:8100/" -method POST -body "$hook" -H "x-signature: $sig" -d "${secs}s" -c 32 | tee -a "$results"
	"$work/loadgen" -label deno-webhook -addr 127.0.0.1:8101 -url "http://127.0.0.1:8101/" -method POST -body "$hook" -H "x-signature: $sig" -d "${secs}s" -c 32 | tee -a "$results"
done
python3 bench/summary.py "$results" retainer-page/workerd-page retainer-page/deno-page retainer-post/workerd-post retainer-post/deno-post \
	retainer-webhook/workerd-webhook retainer-webhook/deno-webhook
