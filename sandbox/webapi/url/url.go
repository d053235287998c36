// Package url is the Go half of the runtime's URL and URLSearchParams: the
// WHATWG URL parser (internal/urlparse) behind url-fast.js's fast path.
// The JavaScript half is bundled with whatwg-url from npm at build time
// (url-entry.js, url-lean.js, url-fast.js, urlencoded-fast.js,
// percent-utf8.js, and tr46 for international hosts, loaded on first need:
// tr46-entry.js, tr46-lazy.js; sandbox/js/build) into a module the runtime
// compiles on a program's first touch of URL or URLSearchParams.
package url

import (
	"github.com/retainer-gw/retainer/internal/urlparse"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

// API is the URL parser's Go half.
var API = webapi.API{Ops: []webapi.Op{
	{Name: "urlParse", Args: 2, Needs: "an input and a base", Do: parse},
}}

// parse is urlParse(input, base) for url-fast.js: the URL record of input
// against base (a serialized URL, or "" for none) in urlparse.Parse's
// form; "" when input is not a URL; "?" when the JavaScript parser must
// decide (a record always holds a newline, so neither answer can be taken
// for one). url-fast.js passes strings only.
func parse(args []webapi.Arg) (string, error) {
	wire, outcome := urlparse.Parse(args[0].String(), args[1].String())
	switch outcome {
	case urlparse.Failure:
		wire = ""
	case urlparse.Deferred:
		wire = "?"
	}
	return wire, nil
}
