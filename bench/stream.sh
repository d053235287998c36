#!/usr/bin/env bash
# Streamed responses (README.md, API): time to first byte of an SSE handler, the
# throughput of one long stream (64 KiB chunks), and the memory of many idle
# SSE streams held open. Usage: bash bench/stream.sh [idle streams, default 1000]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
go build -o "$work/streamload" ./bench/streamload
idle=${1:-1000}
BENCH_MAX_RESPONSE=256MiB BENCH_STREAM_TIMEOUT=10m start_gateway

sse=$(deploy '{"retainHandles":true,"concurrency":1000,"code":"async () => ({ fetch(request) { const url = new URL(request.url); const every = +(url.searchParams.get(\"every\") || 60000); let timer; const body = new ReadableStream({ start(c) { c.enqueue(\"data: hello\\n\\n\"); timer = setInterval(() => c.enqueue(\"data: tick\\n\\n\"), every); }, cancel() { clearInterval(timer); } }); return new Response(body.pipeThrough(new TextEncoderStream()), { headers: { \"content-type\": \"text/event-stream\" } }); } })"}')
bulk=$(deploy '{"retainHandles":true,"code":"async () => ({ fetch() { const chunk = new Uint8Array(65536).fill(120); let n = 0; return new Response(new ReadableStream({ pull(c) { if (n++ < 1024) c.enqueue(chunk); else c.close(); } })); } })"}')
small=$(deploy '{"retainHandles":true,"code":"async () => ({ fetch() { const chunk = new TextEncoder().encode(\"data: x\\n\\n\"); let n = 0; return new Response(new ReadableStream({ pull(c) { if (n++ < 20000) c.enqueue(chunk); else c.close(); } })); } })"}')

"$work/streamload" -mode ttfb -n 300 -url "http://$sse.apps.localhost:8089/"
"$work/streamload" -mode throughput -url "http://$bulk.apps.localhost:8089/"
echo "(64 MiB in 64 KiB chunks)"
"$work/streamload" -mode throughput -url "http://$small.apps.localhost:8089/"
echo "(20,000 chunks of 10 bytes)"

rss() { # the gateway's and its workers' RSS, KiB
	local total=0
	for pid in $gw $(pgrep -P "$gw" || true); do
		total=$((total + $(awk '/VmRSS/ {print $2}' /proc/$pid/status)))
	done
	echo $total
}
before=$(rss)
"$work/streamload" -mode idle -n "$idle" -hold 20s -url "http://$sse.apps.localhost:8089/" &
load=$!
sleep 10
during=$(rss)
wait $load
echo "RSS of gateway + workers: $before KiB before, $during KiB with $idle idle streams: $(( (during - before) / idle )) KiB a stream"
