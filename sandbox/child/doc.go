// Package child is the worker process: what runs inside the boundary the
// gateway's pool (package workers) starts. Main takes the connection the
// pool handed it (package wire), and on the pool's hello starts the
// sandbox engine, then hardens the process (harden_linux.go: no_new_privs,
// a seccomp filter, Landlock, rlimits; foreign_*: system calls from code
// that is not the worker's own end it) before it serves a single run
// (serve.go). Its programs' host calls go through the host cache
// (internal/hostcache; kv/cache: kv's read cache and write queue, kept
// coherent by the gateway's word), whose messages it carries unread.
//
// The package trusts nothing but its parent: the gateway's frames are the
// only input it serves, and its programs reach the world only through
// host calls the gateway answers.
package child
