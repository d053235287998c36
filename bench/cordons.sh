#!/usr/bin/env bash
# Tenant cordons, measured (issue 12): an idle worker's RSS, a new tenant's
# first run (the spare worker ready), and a computation's p50 with cordons
# on, at the default prewarm. Loopback only. Usage: bash bench/cordons.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
export BENCH_WORKERS=8 BENCH_PREWARM=2
start_gateway
sleep 1
echo "spare worker, idle (prewarm 2):"
curl -s http://localhost:2089/retainer/workers | python3 -c '
import json,sys
for w in json.load(sys.stdin)["workers"]:
    if w["state"] == "up": print("  pid %d tenant %r isolates %d rss %.1f MiB" % (w["pid"], w["tenant"], w["isolates"], w["rssBytes"]/2**20))'
echo "first run of a new tenant (the spare ready; 1 s between tenants for the next spare):"
for n in 1 2 3 4 5; do
	tok=$("$work/retainer" retainer-token --sub "tenant-$n" --iss "" --aud "" --secret-env BENCH_SECRET)
	curl -s -o /dev/null -w "  tenant-$n: %{time_total} s\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $tok" \
		http://127.0.0.1:8089/executions -d '{"code": "async () => 1 + 1"}'
	sleep 1
done
echo "the same tenants' second runs:"
for n in 1 2 3; do
	tok=$("$work/retainer" retainer-token --sub "tenant-$n" --iss "" --aud "" --secret-env BENCH_SECRET)
	curl -s -o /dev/null -w "  tenant-$n: %{time_total} s\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $tok" \
		http://127.0.0.1:8089/executions -d '{"code": "async () => 1 + 1"}'
done
curl -s http://localhost:2089/retainer/workers | python3 -c '
import json,sys
ws=[w for w in json.load(sys.stdin)["workers"] if w["state"] == "up"]
print("workers up: %d, RSS %s MiB" % (len(ws), ", ".join("%.1f" % (w["rssBytes"]/2**20) for w in ws)))'
"$work/loadgen" -label "executions (cordoned, sequential)" -method POST -url http://api.localhost:8089/executions \
	-body '{"code": "async () => 1 + 1"}' -d 10s -c 1
