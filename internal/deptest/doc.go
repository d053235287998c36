// Package deptest holds the test that keeps the dependency arrows pointing
// one way (caddymodule → handles → sandbox; authz beside). It has no code of
// its own.
package deptest
