#!/usr/bin/env bash
# A bystander's latency while another tenant's runs spawn children that
# spin and return at once (issue 39: a request that answered in 0.16 s had
# burned 8.6 CPU-seconds, and the bystander's p50 went 2.4 -> 85 ms).
# Children end with their parent's run, in their worker too (the worker
# protocol's cancel frame). Prints the bystander's req/s and p50/p99 alone,
# then under the attack, and the gateway's process CPU the attack cost.
# Usage: bash bench/spawnattack.sh [seconds, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
BENCH_WORKERS=${BENCH_WORKERS:-auto}
export BENCH_WORKERS
source bench/lib.sh
start_gateway
bob=$("$work/retainer" retainer-token --sub bob --iss "" --aud "" --secret-env BENCH_SECRET)
mallory=$("$work/retainer" retainer-token --sub mallory --iss "" --aud "" --secret-env BENCH_SECRET)
id=$(curl -s -H "Host: tenants.localhost" -H "Authorization: Bearer $bob" http://127.0.0.1:8089/executions -d "$(handle_json bench/workerd/trivial.js)" | sed -E 's/.*"executionId":"([^"]+)".*/\1/')
attack='{"capabilities": ["spawn"], "timeoutMs": 10000, "body": "for (let i = 0; i < 50; i++) spawn(\"for (;;) {}\").catch(() => {}); await new Promise(r => setTimeout(r, 100)); return \"left\""}'
curl -s -o /dev/null -H "Host: tenants.localhost" -H "Authorization: Bearer $mallory" http://127.0.0.1:8089/run -d "$attack"
sleep 1
"$work/loadgen" -label "bystander alone" -url "http://$id.apps.localhost:8089/" -d "${secs}s" -c 8
cpu() { awk '{print $14 + $15}' /proc/$gw/stat; }
children() { for p in $(pgrep -P "$gw"); do awk '{s += $14 + $15} END {print s}' /proc/$p/stat; done | awk '{s += $1} END {print s + 0}'; }
before=$(children)
(
	end=$((SECONDS + secs))
	while [ $SECONDS -lt $end ]; do
		curl -s -o /dev/null -w "  attack run answered in %{time_total} s\n" -H "Host: tenants.localhost" -H "Authorization: Bearer $mallory" http://127.0.0.1:8089/run -d "$attack" >> "$work/attack.log"
		sleep 0.5
	done
) &
attacker=$!
"$work/loadgen" -label "bystander, attacked" -url "http://$id.apps.localhost:8089/" -d "${secs}s" -c 8
wait $attacker
after=$(children)
runs=$(wc -l < "$work/attack.log")
head -3 "$work/attack.log"
echo "attack runs: $runs; the workers' CPU during the attack: $(( (after - before) ))/100 s ($(( (after - before) / (runs > 0 ? runs : 1) ))/100 s a run)"
