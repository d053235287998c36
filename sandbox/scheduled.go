package sandbox

import "github.com/retainer-gw/retainer/program"

// Schedules (docs/schedules.md): the invocation of a cron tick, its url
// and its answer's header are the program package's (program/events.go);
// the engine checks a tick's url again (program.IsScheduledURL) and marks
// its wire lines as a socket event's are (websocket.go).

// ScheduledEvent is the invocation name of a cron tick; only the gateway
// sends it (the API and the executor socket invoke "fetch" only).
const ScheduledEvent = program.ScheduledEvent

// ScheduledNoRetry is the answer's header when the handler called
// controller.noRetry().
const ScheduledNoRetry = program.ScheduledNoRetry

// ScheduledRequest is the invocation of cron's tick at scheduledTime (ms
// since the epoch, UTC).
func ScheduledRequest(cron string, scheduledTime int64) WireRequest {
	return program.ScheduledRequest(cron, scheduledTime)
}
