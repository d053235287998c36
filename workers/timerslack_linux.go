package workers

/*
#include <stdlib.h>
#include <sys/prctl.h>

// Runs before Go's runtime starts: see below.
__attribute__((constructor)) static void retainer_timer_slack(void) {
	const char *v = getenv("RETAINER_TIMER_SLACK_NS");
	if (v == NULL || *v == 0) {
		return;
	}
	char *end = NULL;
	long ns = strtol(v, &end, 10);
	if (end == NULL || *end != 0 || ns <= 0) {
		return;
	}
	prctl(PR_SET_TIMERSLACK, (unsigned long)ns, 0, 0, 0);
}
*/
import "C"

// RETAINER_TIMER_SLACK_NS, in the gateway's environment, sets the timer
// slack every thread of the gateway starts with (docs/decisions.md, "Timer
// slack: the operator's choice, not the default"): the C constructor above
// sets it on the main thread before Go's runtime makes its first thread, so
// Go's sysmon has it, and the workers inherit it across the fork (their own
// environment is empty, so their constructor leaves it). What it is for is
// sysmon, which sleeps 20 µs between its checks after a wake and whenever it
// has just taken a P back from a system or cgo call (every V8 call is one):
// it was ~45% of the context switches of both the gateway and its worker
// under load (docs/history/performance-log.md, "The hop's wakes"). At 1 ms
// its naps fold together and stateless handlers cost ~12% less CPU a
// request, but sysmon then takes a P back from a long system call (a
// store's fsync) or V8 call that much later, and the kv counter served
// 20–30% fewer requests: so it is not set unless the operator asks.
