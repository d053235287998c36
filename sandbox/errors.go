package sandbox

import (
	_ "embed"
	"errors"
	"strings"

	v8 "rogchap.com/v8go"
)

// jsThrow is a value a program threw.
type jsThrow struct{ message string }

func (e *jsThrow) Error() string { return e.message }

// describeThrown renders a thrown value: an Error's stack (which names only
// program.js frames), anything else as a string.
func describeThrown(v *v8.Value) string {
	if v.IsObject() && v.IsNativeError() {
		// AsObject casts; Object() would make a Value that lived until the
		// isolate ended, one per thrown error.
		obj, _ := v.AsObject()
		if st, err := obj.Get("stack"); err == nil {
			defer st.Release()
			if st.IsString() {
				return st.String()
			}
		}
	}
	return v.DetailString()
}

// jsError turns an error from a V8 call into the message a client reads.
// The text is cut at its bound (README.md, Caddyfile).
func jsErrorMessage(err error) string {
	var je *v8.JSError
	if errors.As(err, &je) {
		msg := je.Message
		if je.StackTrace != "" && strings.Contains(je.StackTrace, "\n") {
			msg = je.StackTrace
		} else if je.Location != "" {
			msg += " (" + je.Location + ")"
		}
		return cutThrown(msg)
	}
	var jt *jsThrow
	if errors.As(err, &jt) {
		return cutThrown(jt.message)
	}
	return cutThrown(err.Error())
}
