// Package deptest holds the test that keeps the dependency arrows pointing
// one way (caddymodule → handles → workers → program; authz beside)
// and the one that keeps V8 out of the gateway's packages (only the
// worker's side links it). It has no code of its own.
package deptest
