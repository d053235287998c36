// Package caddymodule is Retainer's Caddy integration, and the only package
// of the gateway that imports Caddy. It links no V8: the worker subcommand
// the binary also holds is registered where the binary is assembled (the
// module's root package, command.go).
//
// It registers:
//
//   - the app `retainer` (global option): worker processes, the bbolt store
//     and the limits, kept across config reloads in a caddy.UsagePool keyed
//     by the store's path (runtime.go);
//   - `http.handlers.retainer_api`: the control plane of README.md, API (api.go);
//   - `http.handlers.retainer`: the data plane of README.md, API (data.go);
//   - `http.authentication.providers.retainer_jwt` and the handler
//     `http.handlers.retainer_jwt` that uses it and writes the 401 answer
//     itself (jwt.go);
//   - the Caddyfile syntax of all of them, with directive order registered
//     (caddyfile.go: the global option; caddyfile_directives.go: the site
//     directives), and metrics (metrics.go).
//
// The package wires handles (registries), workers (isolates in
// worker processes) and authz (tokens); it holds no policy of its own beyond
// HTTP: shapes, status codes and headers.
package caddymodule
