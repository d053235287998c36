package program

import (
	"strconv"
	"strings"

	"github.com/retainer-gw/retainer/sandbox/webapi/websocket"
)

// Schedules (docs/schedules.md): at a cron tick the gateway calls the
// handler object's scheduled(controller, env, ctx) as an invocation named
// ScheduledEvent, under the handle's concurrency rules and bounds like a
// fetch. Its wire lines are marked as a socket event's are (an empty first
// line, which no visitor's request has) and its url says the tick:
// "scheduled:<ms>:<cron>". The answer is a response without a body: 204
// when scheduled() settled, 500 (the thrown text as its body) when it
// threw, 404 when the handler has no scheduled method; the header
// ScheduledNoRetry when it called controller.noRetry().

// ScheduledEvent is the invocation name of a cron tick; only the gateway
// sends it (the API and the executor socket invoke "fetch" only).
const ScheduledEvent = "scheduled"

// ScheduledNoRetry is the answer's header when the handler called
// controller.noRetry().
const ScheduledNoRetry = "retainer-no-retry"

const scheduledPrefix = "scheduled:"

// ScheduledRequest is the invocation of cron's tick at scheduledTime (ms
// since the epoch, UTC).
func ScheduledRequest(cron string, scheduledTime int64) WireRequest {
	return NewWireRequest("GET", scheduledPrefix+strconv.FormatInt(scheduledTime, 10)+":"+cron, nil, nil)
}

// IsScheduledURL checks a tick's url (the gateway's own, checked again by
// the engine).
func IsScheduledURL(url string) bool {
	rest, ok := strings.CutPrefix(url, scheduledPrefix)
	if !ok {
		return false
	}
	ms, _, ok := strings.Cut(rest, ":")
	_, err := strconv.ParseInt(ms, 10, 64)
	return ok && err == nil
}

// NoRetry says whether a tick's answer asks not to be retried.
func (r WireResponse) NoRetry() bool {
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], ScheduledNoRetry) {
			return true
		}
	}
	return false
}

// WebSockets to a handle (docs/websockets.md): what the visitor sends
// comes back to the handler as invocations named SocketEvent, one an
// event, in order, under the handle's concurrency rules and bounds
// (sandbox/websocket.go is the engine's side of them).

// SocketEvent is the invocation name of an event for a handler's socket;
// only the gateway sends it (the API and the executor socket invoke
// "fetch" only).
const SocketEvent = "websocket"

// SocketEventRequest is the invocation that delivers an event to the
// handler's socket opened as stream: a message (websocket.Text, Binary)
// or the visitor's close (code, reason in data).
func SocketEventRequest(stream int64, kind byte, code int, data []byte) WireRequest {
	return NewWireRequest("GET", websocket.EventURL(stream, kind, code), nil, data)
}
