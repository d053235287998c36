// Command retainer is Caddy with Retainer's modules and Caddy's standard
// ones: `retainer run --config Caddyfile.example`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	// Retainer's modules (caddymodule) and the worker subcommand.
	_ "github.com/retainer-gw/retainer"
)

func main() {
	caddycmd.Main()
}
