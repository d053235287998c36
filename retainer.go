// Package retainer plugs Retainer's Caddy modules into a Caddy build:
// `xcaddy build --with github.com/retainer-gw/retainer` (see xcaddy.txt).
// The modules themselves live in caddymodule/; the worker subcommand
// (command.go), which links V8, is registered here, where the binary is
// assembled.
package retainer

import (
	_ "github.com/retainer-gw/retainer/caddymodule"
)
