// Package docstest keeps the project's docs true to its tree: its test
// fails when the README, docs/architecture.md, docs/cluster.md,
// docs/performance.md or bench/README.md names a
// file that does not exist, or when docs/architecture.md leaves out a
// folder of Go code. It has no code of its own.
package docstest
