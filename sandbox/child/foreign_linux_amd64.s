#include "textflag.h"

// func int80(nr uintptr) uintptr
// A system call through the 32-bit entry, for the probe that proves the
// seccomp filter kills a worker that tries it.
TEXT ·int80(SB),NOSPLIT,$0-16
	MOVQ nr+0(FP), AX
	INT $0x80
	MOVQ AX, ret+8(FP)
	RET
