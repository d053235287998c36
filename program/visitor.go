package program

// VisitorOp reports a host call that waits for the visitor's request
// body: body.read, and objects.upload, a bucket.put of the request body
// the gateway reads itself (docs/objects.md), bounded the same way. The
// pool and the isolate both need to know (the pool counts the wait as the
// visitor's, not the handler's), so it lives with the values they share.
func VisitorOp(op string) bool { return op == "body.read" || op == "objects.upload" }
