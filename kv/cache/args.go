package cache

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// kvArgs are a kv call's arguments, as the runtime sends them.
type kvArgs struct {
	Key   *string `json:"key"`
	Value *string `json:"value"`
}

// decodeArgs reads a kv call's arguments. The runtime writes them with
// JSON.stringify, as {"key":K} or {"key":K,"value":V}; those whose strings
// hold no escape (nearly all) are read here without encoding/json's
// reflection, which was ~4% of a worker's samples under a kv counter.
// Anything else goes to json.Unmarshal, whose answer is the definition:
// FuzzKVArgs checks that the two never differ.
func decodeArgs(args []byte) (kvArgs, error) {
	if a, ok := plainKVArgs(args); ok {
		return a, nil
	}
	var a kvArgs
	err := json.Unmarshal(args, &a)
	return a, err
}

var (
	kvKeyHead   = []byte(`{"key":"`)
	kvValueHead = []byte(`,"value":"`)
)

// plainKVArgs reads the two shapes JSON.stringify writes, when their
// strings need no unescaping; ok is false for anything else.
func plainKVArgs(b []byte) (kvArgs, bool) {
	if !bytes.HasPrefix(b, kvKeyHead) {
		return kvArgs{}, false
	}
	key, rest, ok := plainJSONString(b[len(kvKeyHead):])
	if !ok {
		return kvArgs{}, false
	}
	a := kvArgs{Key: &key}
	if len(rest) == 1 && rest[0] == '}' {
		return a, true
	}
	if !bytes.HasPrefix(rest, kvValueHead) {
		return kvArgs{}, false
	}
	value, rest, ok := plainJSONString(rest[len(kvValueHead):])
	if !ok || len(rest) != 1 || rest[0] != '}' {
		return kvArgs{}, false
	}
	a.Value = &value
	return a, true
}

// plainJSONString reads a JSON string's body up to its closing quote when
// it holds no escape, no control character and only valid UTF-8; rest is
// what follows the quote.
func plainJSONString(b []byte) (s string, rest []byte, ok bool) {
	for i, c := range b {
		switch {
		case c == '"':
			if !utf8.Valid(b[:i]) {
				return "", nil, false
			}
			return string(b[:i]), b[i+1:], true
		case c == '\\' || c < 0x20:
			return "", nil, false
		}
	}
	return "", nil, false
}
