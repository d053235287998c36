package sandbox

// #include "threadhold.h"
import "C"

import (
	"unsafe"

	v8 "rogchap.com/v8go"
)

// threadHold is an outer v8::Locker and Isolate::Enter held by the
// isolate's loop thread (see threadhold.cc for why). Take it on the loop's
// goroutine after runtime.LockOSThread, release it there before Dispose;
// while it is held, no other thread may make a v8go call on the isolate
// (the vm's rule already: every V8 call happens on its loop).
type threadHold struct {
	iso unsafe.Pointer
	h   unsafe.Pointer
}

func holdIsolate(iso *v8.Isolate) threadHold {
	p := isolatePointer(iso)
	return threadHold{iso: p, h: C.retainer_isolate_hold(p)}
}

func (t *threadHold) release() {
	if t.h == nil {
		return
	}
	C.retainer_isolate_release(t.iso, t.h)
	t.h = nil
}
