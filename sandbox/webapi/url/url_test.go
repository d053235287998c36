package url

import "testing"

// The parser's three answers through the operation, without an isolate: a
// record (its fields on lines), "" for what is not a URL, and "?" where
// the JavaScript parser must decide (a host that needs IDNA).
func TestParseAnswers(t *testing.T) {
	rec, err := API.Run(nil, "urlParse", "https://example.com/a?b#c", "")
	if err != nil || rec == "" || rec == "?" {
		t.Fatalf("a plain URL: %q %v", rec, err)
	}
	if got, _ := API.Run(nil, "urlParse", "not a url", ""); got != "" {
		t.Fatalf("not a URL answered %q", got)
	}
	if got, _ := API.Run(nil, "urlParse", "https://bücher.example/", ""); got != "?" {
		t.Fatalf("an IDNA host answered %q, want the JavaScript parser's turn", got)
	}
	if _, err := API.Run(nil, "urlParse", "https://x/"); err == nil {
		t.Fatal("a call without a base was taken")
	}
}
