package sandbox

import (
	"errors"

	"github.com/retainer-gw/retainer/internal/urlparse"
	v8 "rogchap.com/v8go"
)

// hostURLParse is urlParse(input, base) for js/url-fast.js: the URL record
// of input against base (a serialized URL, or "" for none) in
// urlparse.Parse's form; "" when input is not a URL; "?" when the
// JavaScript parser must decide (a record always holds a newline, so
// neither answer can be taken for one).
func (m *vm) hostURLParse(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 || !args[0].IsString() || !args[1].IsString() {
		return nil, errors.New("urlParse needs an input and a base")
	}
	wire, outcome := urlparse.Parse(args[0].String(), args[1].String())
	switch outcome {
	case urlparse.Failure:
		wire = ""
	case urlparse.Deferred:
		wire = "?"
	}
	return v8.NewValue(m.iso, wire)
}
