package sandbox

// The link wraps V8's isolate and context constructors (snapshot.cc says
// why). GNU ld's --wrap sends v8go's calls to our __wrap_ functions; the
// names are V8 11.1's mangled symbols, which change only with the v8go
// version in go.mod (TestIsolatesStartFromTheSnapshot fails if they stop
// being wrapped). Other systems build without the snapshot.

// #cgo LDFLAGS: -Wl,--wrap=_ZN2v87Isolate3NewERKNS0_12CreateParamsE -Wl,--wrap=_ZN2v87Context3NewEPNS_7IsolateEPNS_22ExtensionConfigurationENS_10MaybeLocalINS_14ObjectTemplateEEENS5_INS_5ValueEEENS_33DeserializeInternalFieldsCallbackEPNS_14MicrotaskQueueE
import "C"
