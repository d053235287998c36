#!/usr/bin/env bash
# CPU per request (issue 13): req/s of `respond`, the trivial counter handle
# and the URL-parsing counter handle at 32 connections, and of computations
# (`async () => 1 + 1`) on one connection back to back and 20 ms apart, each with the CPU
# the gateway and its worker spent per request (utime+stime from
# /proc/<pid>/stat around the run). On a machine whose speed moves from hour
# to hour, CPU per request moves less than req/s. Loopback only.
# Usage: bash bench/cpu.sh [seconds per target, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
source bench/lib.sh
start_gateway
trivial=$(deploy "$(handle_json bench/workerd/trivial.js)")
url=$(deploy "$(handle_json bench/workerd/worker.js)")
tick=$(getconf CLK_TCK)
cpu() { # the utime+stime ticks of the gateway and of all its children
	local g w=0 p
	g=$(awk '{print $14+$15}' /proc/$gw/stat)
	for p in $(pgrep -P "$gw"); do w=$((w + $(awk '{print $14+$15}' /proc/$p/stat))); done
	echo "$g $w"
}
run() { # label url [loadgen flags]
	local before after out n label=$1 url=$2
	shift 2
	before=$(cpu)
	out=$("$work/loadgen" -label "$label" -url "$url" -d "${secs}s" -c 32 "$@")
	after=$(cpu)
	n=$(echo "$out" | awk '{print $2 * '"$secs"'}')
	echo "$out" "$(echo "$before $after" | awk -v t="$tick" -v n="$n" '{printf "| gateway %.0f us, worker %.0f us of CPU a request", ($3-$1)/t*1e6/n, ($4-$2)/t*1e6/n}')"
}
run respond http://respond.localhost:8089/
run trivial "http://$trivial.apps.localhost:8089/"
run url "http://$url.apps.localhost:8089/items?id=42&sort=asc"
run computation http://api.localhost:8089/executions -c 1 -method POST -body '{"code": "async () => 1 + 1"}'
run computation-20ms-apart http://api.localhost:8089/executions -c 1 -pause 20ms -method POST -body '{"code": "async () => 1 + 1"}'
