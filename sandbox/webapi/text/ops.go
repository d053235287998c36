// Package text is the Go half of the runtime's text and byte streams
// (06-text.js): the Encoding Standard's encodings other than UTF-8 for
// TextDecoder (encoding.go, golang.org/x/text), and the Compression
// Standard's CompressionStream and DecompressionStream (compression.go,
// Go's compress packages). TextEncoder and UTF-8 are the runtime's own
// (V8's conversions). A streaming decoder and a compression stream keep
// their state between calls in the isolate's session.
package text

import "github.com/retainer-gw/retainer/sandbox/webapi"

// API is the text streams' Go half, declared once.
var API = webapi.API{
	Ops: []webapi.Op{
		{Name: "encodingName", Args: 1, Needs: "a label", Do: encodingName},
		{Name: "decodeLegacy", Args: 4, Needs: "an id, a label, bytes and stream", With: with((*session).decodeLegacy)},
		{Name: "codecInit", Args: 3, Needs: "an id, a format and a direction", With: with((*session).codecInit)},
		{Name: "codecChunk", Args: 3, Needs: "an id, bytes and last", With: with((*session).codecChunk)},
	},
	NewSession: func() webapi.Session { return &session{} },
}

// session is what one isolate's decoders and compression streams keep
// between calls.
type session struct {
	decoders map[int32]*streamingDecoder // TextDecoders of other encodings mid-stream (encoding.go)
	codecs   map[int32]*codec            // compression streams in progress (compression.go)
}

// Close ends every compression stream (the isolate is ending).
func (s *session) Close() { s.closeCodecs() }

// with makes a session method an operation.
func with(f func(*session, []webapi.Arg) (string, error)) func(webapi.Session, []webapi.Arg) (string, error) {
	return func(s webapi.Session, args []webapi.Arg) (string, error) { return f(s.(*session), args) }
}
