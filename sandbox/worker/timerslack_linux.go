package worker

/*
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

// Runs before Go's runtime starts (glibc passes argc and argv to ELF
// constructors): see timerSlack below. A worker (argv[1] is the worker
// subcommand) keeps the slack its gateway's thread gave it at the fork.
__attribute__((constructor)) static void retainer_timer_slack(int argc, char **argv, char **envp) {
	if (argc > 1 && argv[1] != NULL && strcmp(argv[1], "retainer-worker") == 0) {
		return;
	}
	long ns = 1000000;
	const char *v = getenv("RETAINER_TIMER_SLACK_NS");
	if (v != NULL && *v != 0) {
		char *end = NULL;
		long n = strtol(v, &end, 10);
		if (end == NULL || *end != 0 || n < 0) {
			return;
		}
		ns = n;
	}
	if (ns > 0) {
		prctl(PR_SET_TIMERSLACK, (unsigned long)ns, 0, 0, 0);
	}
}
*/
import "C"

// timerSlack is the timer slack every thread of the gateway's binary starts
// with, and its workers inherit across the fork: 1 ms instead of the
// kernel's 50 µs, set by the C constructor above on the main thread before
// Go's runtime makes its first thread (docs/decisions.md, "Every thread
// sleeps with a 1 ms timer slack"). What it is for is Go's sysmon thread,
// which sleeps 20 µs between its checks after a wake and whenever it has
// just taken a P back from a system or cgo call (every V8 call is one): it
// was ~45% of the context switches of both the gateway and its worker
// under load (docs/history/performance-log.md, "The hop's wakes"); with
// the slack its naps fold into ~1 ms. Every other timed sleep of the
// process (Go's timers, whose poller waits in whole milliseconds anyway,
// futex and condition-variable timeouts) may end up to the slack late.
// RETAINER_TIMER_SLACK_NS, in the gateway's environment, sets another
// value (0: the slack it was started with); workers, with their empty
// environment, keep their gateway's.
const timerSlack = 1_000_000
