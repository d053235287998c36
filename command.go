package retainer

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/retainer-gw/retainer/sandbox/child"
	"github.com/retainer-gw/retainer/workers"
)

// The worker subcommand is registered here, where the binary is assembled,
// not in caddymodule: the gateway re-executes its own binary as its
// workers, so the binary must hold the worker's Main (sandbox/child) and
// with it V8, but caddymodule, the gateway's side, links none
// (docs/architecture.md, "Which binaries link V8").
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  workers.Subcommand,
		Short: "Runs a Retainer worker process (started by the gateway, not by hand)",
		Long: `
A worker hosts V8 isolates for the gateway that started it, over the
two socketpairs it inherits. It hardens itself (seccomp, Landlock, rlimits) and
exits when its connection to the gateway closes. The gateway starts workers
itself; running this command by hand only prints an error.`,
		Func: func(caddycmd.Flags) (int, error) {
			child.Main()
			return 0, nil
		},
	})
}
