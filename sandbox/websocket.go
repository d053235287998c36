package sandbox

// WebSockets to a handle (docs/websockets.md). A handler accepts one with
// `new Response(null, {status: 101, webSocket: client})`: the answer is a
// streamed response of status 101 whose stream carries what the handler
// sends, as records; what the visitor sends comes back as invocations
// named SocketEvent, one an event, in order, under the handle's
// concurrency rules and bounds. The runtime's WebSocket and the record
// format are in webapi/websocket; this is the engine's side of the events.

// socketEventLines marks an event's wire lines: they start with an empty
// line, which no request has (its method is a token), so a visitor's
// request can never be taken for an event.
func socketEventLines(lines string) string { return "\n" + lines }

// socketQueueShare is the part of an isolate's memory bound that the sends
// waiting for its sockets' visitors may hold, all sockets together, and
// socketQueueMost the most they may hold at all: past it the runtime
// closes the sockets read least recently with 1008 (docs/websockets.md), so a
// visitor who opens sockets it never reads cannot make the isolate hit its
// memory bound (which would close every other visitor's socket with 1011).
const (
	socketQueueShare = 4 // a quarter
	socketQueueMost  = 8 << 20
)

// socketQueueBound answers the bytes the sockets of an isolate bounded at
// memoryMiB may hold waiting, all together (host.socketQueueBound:
// webapi/websocket/24-websocket.js).
func socketQueueBound(memoryMiB int) int32 {
	return int32(min(socketQueueMost, (memoryMiB<<20)/socketQueueShare))
}
