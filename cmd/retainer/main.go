// Command retainer is Caddy with Retainer's modules and Caddy's standard
// ones: `retainer run --config Caddyfile.example`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/retainer-gw/retainer/caddymodule"
)

func main() {
	caddycmd.Main()
}
