package cache

import (
	"encoding/json"
	"reflect"
	"testing"
)

var kvArgsSeeds = []string{
	`{"key":"c"}`,
	`{"key":"c","value":"41"}`,
	`{"key":"","value":""}`,
	`{"key":"naïve ☃","value":"ünïcode"}`,
	`{"key":"a\"b"}`,
	`{"key":"a\\b","value":"x"}`,
	`{"key":"a\u0000b"}`,
	`{"key":"\ud800"}`,
	`{"key":"a","key":"b"}`,
	`{"value":"v","key":"k"}`,
	`{"key":"k","value":"v","x":1}`,
	`{"key":"k","value":"v"} `,
	`{"key":"k","value":null}`,
	`{"key":null}`,
	`{"key":"k"`,
	`{"key":"k"}}`,
	"{\"key\":\"\xff\"}",
	"{\"key\":\"a\tb\"}",
	`{"key": "spaced"}`,
	`[]`,
	``,
}

// The fast reading answers exactly what json.Unmarshal answers whenever it
// answers at all, and takes the shapes the runtime writes.
func TestKVArgsReadAsJSONWould(t *testing.T) {
	for _, in := range kvArgsSeeds {
		checkKVArgs(t, []byte(in))
	}
	for _, in := range []string{`{"key":"c"}`, `{"key":"c","value":"41"}`, `{"key":"naïve ☃","value":"ü"}`} {
		if _, ok := plainKVArgs([]byte(in)); !ok {
			t.Errorf("%s: the runtime's own shape took the slow path", in)
		}
	}
	for _, in := range []string{`{"key":"a\"b"}`, "{\"key\":\"\xff\"}", `{"key":"k","value":null}`, `{"key":"a","key":"b"}`} {
		if _, ok := plainKVArgs([]byte(in)); ok {
			t.Errorf("%s: read on the fast path", in)
		}
	}
}

func checkKVArgs(t *testing.T, in []byte) {
	t.Helper()
	fast, ok := plainKVArgs(in)
	var want kvArgs
	werr := json.Unmarshal(in, &want)
	if ok && (werr != nil || !reflect.DeepEqual(fast, want)) {
		t.Fatalf("%q: fast %v, json.Unmarshal %v (%v)", in, show(fast), show(want), werr)
	}
	got, gerr := decodeArgs(in)
	if (gerr == nil) != (werr == nil) || werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decodeArgs %v (%v), json.Unmarshal %v (%v)", in, show(got), gerr, show(want), werr)
	}
}

func show(a kvArgs) [2]any {
	var out [2]any
	if a.Key != nil {
		out[0] = *a.Key
	}
	if a.Value != nil {
		out[1] = *a.Value
	}
	return out
}

// go test ./kv/cache -run '^$' -fuzz FuzzKVArgs -fuzztime 30s
func FuzzKVArgs(f *testing.F) {
	for _, s := range kvArgsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkKVArgs(t, in) })
}
