// Package program holds what the gateway and an isolate say to each
// other, as values: the program a tenant sends (Program, Origin), one run
// of it (Job, Bindings) and what the run answers (Outcome), a request to a
// retained handler and its answer (WireRequest, WireResponse), a console
// line (LogEntry), and the invocations only the gateway makes (a cron
// tick, ScheduledEvent; a visitor's socket event, SocketEvent).
//
// It imports no V8: the gateway (the worker pool, its wire protocol, the
// registry of handles) builds on these types without linking the engine;
// only the worker process, which hosts sandbox's engine, links V8
// (docs/architecture.md). What the engine does with them (compiling a
// program, the lines a request crosses into an isolate as, the checks on
// an answer) is sandbox's.
package program
