// Package retainer plugs Retainer's Caddy modules into a Caddy build:
// `xcaddy build --with github.com/retainer-gw/retainer` (see xcaddy.txt).
// The modules themselves live in caddymodule/.
package retainer

import (
	_ "github.com/retainer-gw/retainer/caddymodule"
)
