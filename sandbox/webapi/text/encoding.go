package text

import (
	"errors"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/text/transform"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

// The Encoding Standard's encodings other than UTF-8 (which the runtime
// decodes in JavaScript) come from golang.org/x/text behind two host
// functions: encodingName resolves a label as the standard does, and
// decodeLegacy decodes one chunk. A streaming decoder keeps its x/text
// transformer (stateful encodings such as ISO-2022-JP need it) and its
// unfinished bytes between calls, keyed by the JavaScript decoder's id; at
// most budgets.TextDecodersPerIsolate live per isolate, another going
// first.
// streamingDecoder is one TextDecoder's state between stream: true calls.
type streamingDecoder struct {
	dec     transform.Transformer
	pending []byte
}

// encodingFor resolves a label (ASCII whitespace already trimmed by the
// runtime) to an encoding and its canonical name; "" for none.
func encodingFor(label string) (encoding.Encoding, string) {
	if label != strings.TrimSpace(label) {
		return nil, "" // only ASCII whitespace is trimmed (x/text trims more)
	}
	enc, err := htmlindex.Get(label)
	if err != nil {
		return nil, ""
	}
	name, err := htmlindex.Name(enc)
	if err != nil {
		return nil, ""
	}
	return enc, name
}

// decodeSingleByte decodes a single-byte encoding byte by byte. The
// Encoding Standard's indexes map the bytes 0x80–0x9F that a code page
// leaves undefined to the C1 controls U+0080–U+009F, where x/text's tables
// answer U+FFFD; elsewhere an undefined byte is an error (U+FFFD).
func decodeSingleByte(cm *charmap.Charmap, src []byte) string {
	var b strings.Builder
	b.Grow(len(src))
	for _, c := range src {
		r := cm.DecodeByte(c)
		if r == utf8.RuneError && c >= 0x80 && c <= 0x9f {
			r = rune(c)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// encodingName is encodingName(label) → the canonical name or "".
func encodingName(args []webapi.Arg) (string, error) {
	_, name := encodingFor(args[0].String())
	return name, nil
}

// decodeLegacy is decodeLegacy(id, label, bytesLatin1, stream) → the
// decoded text; the runtime checks fatal errors on it.
func (s *session) decodeLegacy(args []webapi.Arg) (string, error) {
	id, label, stream := int32(args[0].Integer()), args[1].String(), args[3].Boolean()
	src := wirejson.Latin1Bytes(args[2].String())
	enc, _ := encodingFor(label)
	if enc == nil {
		return "", errors.New("unsupported encoding")
	}
	if cm, ok := enc.(*charmap.Charmap); ok {
		return decodeSingleByte(cm, src), nil
	}
	if s.decoders == nil {
		s.decoders = map[int32]*streamingDecoder{}
	}
	sd := s.decoders[id]
	if sd == nil {
		sd = &streamingDecoder{dec: enc.NewDecoder()}
		if stream {
			if len(s.decoders) >= budgets.TextDecodersPerIsolate {
				for k := range s.decoders { // any one: a program juggling 64 streams loses one's state
					delete(s.decoders, k)
					break
				}
			}
			s.decoders[id] = sd
		}
	}
	if len(sd.pending) > 0 {
		src = append(sd.pending, src...)
		sd.pending = nil
	}
	var out strings.Builder
	dst := make([]byte, 4*len(src)+16)
	for {
		nDst, nSrc, err := sd.dec.Transform(dst, src, !stream)
		out.Write(dst[:nDst])
		src = src[nSrc:]
		if err == transform.ErrShortDst {
			continue
		}
		if err == transform.ErrShortSrc && stream {
			sd.pending = append([]byte(nil), src...)
		}
		break
	}
	if !stream {
		delete(s.decoders, id)
		sd.dec.Reset()
	}
	text := out.String()
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return text, nil
}
