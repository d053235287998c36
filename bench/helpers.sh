# Functions without side effects, for every bench script (source it from
# the repository's root; bench/lib.sh does).

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
