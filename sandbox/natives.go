package sandbox

// natives.cc compiles against the headers of the library v8go links
// (third_party/v8), with v8go's own defines: inline functions in the
// headers read V8's object layout, which these select.

// #cgo CXXFLAGS: -I${SRCDIR}/../third_party/v8/include -DV8_COMPRESS_POINTERS -DV8_31BIT_SMIS_ON_64BIT_ARCH -DV8_ENABLE_SANDBOX
// #include "natives.h"
import "C"

import (
	"errors"

	v8 "rogchap.com/v8go"
)

// hostNatives is host.op("natives"): the bootstrap calls it once, before
// any program, to receive the byte and text conversions natives.cc makes
// (it takes them from the global object and deletes them there).
func (m *vm) hostNatives([]*v8.Value) (*v8.Value, error) {
	if C.retainer_install_natives(isolatePointer(m.iso)) == 0 {
		return nil, errors.New("the native conversions could not be installed")
	}
	return nil, nil
}
