// Package wire is the protocol between the gateway's worker pool (package
// workers) and a worker process (package child), the one thing both sides
// share: the framed connection over their socketpair (rpc.go: length-
// prefixed requests and answers in both directions, cancels, caps;
// call.go: the calls a side sends; write.go: corked and held writes;
// link.go: the socketpairs), every path with its direction and its caps and the
// JSON messages on it (protocol.go), and the binary frames of the hot
// paths, each with its own version byte: invocations and stream reads
// (invokewire.go). What a worker's host cache says to the gateway's side
// (kv/cache) crosses as opaque bytes on paths of its own.
//
// Everything a worker sends is read here as hostile input: every decoder
// checks lengths against what it was given and answers an error, never a
// panic, for a frame it cannot read.
package wire
