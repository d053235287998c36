package sandbox

// #include "entropy.h"
import "C"

// V8 seeds every isolate from getrandom(2) (entropy.cc): installed once,
// before any isolate exists.
func init() { C.retainer_entropy_install() }

// entropySeeds is how many seeds V8 has taken from getrandom (tests).
func entropySeeds() int64 { return int64(C.retainer_entropy_seeds()) }
