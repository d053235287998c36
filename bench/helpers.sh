# Functions for every bench script (source it from the repository's root;
# bench/lib.sh does); sourcing it runs nothing.

# refuse_busy_ports exits when something already listens on one of the
# given loopback ports: Caddy listens with SO_REUSEPORT, so a gateway left
# running there would silently take half the connections (with a registry
# of its own).
refuse_busy_ports() {
	local port
	for port in "$@"; do
		if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then
			echo "something already listens on 127.0.0.1:$port (a gateway left running?); stop it first" >&2
			exit 1
		fi
	done
}

# answered prints how many requests answered 200 in a loadgen run, from
# the stderr it wrote to file.
answered() {
	sed -nE 's/.*: ([0-9]+) answered 200/\1/p' "$1"
}

# start_builds OLD NEW PORT_A PORT_B DIR starts two gateways side by side,
# the binary OLD on PORT_A and NEW on PORT_B (bench/Caddyfile.bench with
# its ports moved: admin on the port less 6000), each with a registry of
# its own under DIR/a and DIR/b; it sets ga and gb to their pids and
# returns once both APIs answer. The caller kills them (its EXIT trap).
start_builds() {
	local old=$1 new=$2 pa=$3 pb=$4 dir=$5 port
	refuse_busy_ports "$pa" "$pb"
	start_build "$old" "$pa" "$dir/a"
	ga=$!
	start_build "$new" "$pb" "$dir/b"
	gb=$!
	for port in "$pa" "$pb"; do
		for _ in $(seq 100); do
			curl -sf -o /dev/null -H 'Host: api.localhost' "http://127.0.0.1:$port/health" && break
			sleep 0.2
		done
	done
}

# start_build BINARY PORT DIR starts one gateway of start_builds in the
# background.
start_build() {
	mkdir -p "$3"
	sed "s/8089/$2/g; s/2089/$(($2 - 6000))/g" bench/Caddyfile.bench > "$3/Caddyfile"
	BENCH_STORE="$3/registry.db" XDG_DATA_HOME="$3" XDG_CONFIG_HOME="$3" "$1" run --config "$3/Caddyfile" > "$3/gateway.log" 2>&1 &
}
