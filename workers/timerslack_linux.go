package workers

/*
#cgo LDFLAGS: -Wl,--wrap=_cgo_try_pthread_create
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// The slack every thread starts with (the operator's RETAINER_TIMER_SLACK_NS,
// or the one the process was started with), and the one Go's sysmon gets.
static unsigned long retainer_base_slack;
static unsigned long retainer_sysmon_slack = 1000000UL;

// A worker's sysmon sleeps longer (see retainer_worker_sysmon_slack's
// comment in Go below): the worker is the process whose first argument is
// the worker subcommand (wire.Subcommand; TestWorkerSysmonSlack checks
// the two agree).
#define RETAINER_WORKER_SUBCOMMAND "retainer-worker"
static const unsigned long retainer_worker_sysmon_slack = 5000000UL;

static int retainer_is_worker(int argc, char **argv) {
	return argc > 1 && argv != NULL && argv[1] != NULL && strcmp(argv[1], RETAINER_WORKER_SUBCOMMAND) == 0;
}
static int retainer_threads_made;
static long retainer_sysmon_tid;

static unsigned long retainer_slack_env(const char *name, unsigned long fallback) {
	const char *v = getenv(name);
	if (v == NULL || *v == 0) {
		return fallback;
	}
	char *end = NULL;
	long ns = strtol(v, &end, 10);
	if (end == NULL || *end != 0 || ns < 0) {
		return fallback;
	}
	return (unsigned long)ns;
}

// Runs before Go's runtime starts: see below. glibc gives an executable's
// constructors its arguments.
__attribute__((constructor)) static void retainer_timer_slack(int argc, char **argv, char **envp) {
	(void)envp;
	unsigned long ns = retainer_slack_env("RETAINER_TIMER_SLACK_NS", 0);
	if (ns > 0) {
		prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0);
	}
	retainer_base_slack = (unsigned long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (retainer_is_worker(argc, argv)) {
		// A worker's environment is empty: the operator's variable never
		// reaches it.
		retainer_sysmon_slack = retainer_worker_sysmon_slack;
		return;
	}
	retainer_sysmon_slack = retainer_slack_env("RETAINER_SYSMON_SLACK_NS", retainer_sysmon_slack);
}

struct retainer_thread_start {
	void *(*fn)(void *);
	void *arg;
	unsigned long slack;
	int sysmon;
};

static void *retainer_thread_begin(void *p) {
	struct retainer_thread_start s = *(struct retainer_thread_start *)p;
	free(p);
	if (s.sysmon) {
		__atomic_store_n(&retainer_sysmon_tid, (long)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
	}
	prctl(PR_SET_TIMERSLACK, s.slack, 0, 0, 0);
	return s.fn(s.arg);
}

// Weak: a Go whose runtime/cgo no longer has it links all the same, and
// its threads keep the slack they inherit.
extern int __real__cgo_try_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) __attribute__((weak));

// Every thread of Go's runtime is made here (runtime/cgo makes each M's
// thread through _cgo_try_pthread_create; the linker's --wrap sends those
// calls to this, and no others: V8's threads are made by pthread_create
// directly). The first is Go's sysmon (runtime.main makes it before any
// other M; the test checks it is the thread that naps); it gets
// retainer_sysmon_slack, and every other M the process's own slack,
// whichever thread made it (a thread inherits its maker's slack, and
// sysmon makes Ms too).
int __wrap__cgo_try_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
	struct retainer_thread_start *s = malloc(sizeof *s);
	if (s == NULL) {
		return __real__cgo_try_pthread_create(t, attr, fn, arg);
	}
	s->fn = fn;
	s->arg = arg;
	s->sysmon = __atomic_add_fetch(&retainer_threads_made, 1, __ATOMIC_SEQ_CST) == 1 && retainer_sysmon_slack > 0;
	s->slack = s->sysmon ? retainer_sysmon_slack : retainer_base_slack;
	int err = __real__cgo_try_pthread_create(t, attr, retainer_thread_begin, s);
	if (err != 0) {
		free(s);
	}
	return err;
}

static long retainer_sysmon_thread(void) { return __atomic_load_n(&retainer_sysmon_tid, __ATOMIC_SEQ_CST); }
static unsigned long retainer_sysmon_slack_ns(void) { return retainer_sysmon_slack; }
static unsigned long retainer_worker_sysmon_slack_ns(void) { return retainer_worker_sysmon_slack; }
static const char *retainer_worker_subcommand(void) { return RETAINER_WORKER_SUBCOMMAND; }
*/
import "C"

// RETAINER_TIMER_SLACK_NS, in the gateway's environment, sets the timer
// slack every thread of the gateway starts with (docs/decisions.md, "Timer
// slack: the operator's choice, not the default"): the C constructor above
// sets it on the main thread before Go's runtime makes its first thread,
// and every M made later starts with it; the workers inherit it across
// the fork (their own environment is empty, so their constructor reads it
// back from the thread instead). At 1 ms its naps fold together and
// stateless handlers cost ~12% less CPU a request, but every timer of the
// process may then fire that much late, and the kv counter served 20–30%
// fewer requests: so it is not set unless the operator asks.
//
// Go's sysmon alone sleeps with a slack of its own by default
// (RETAINER_SYSMON_SLACK_NS, 1 ms, in the gateway; a worker's, below; 0 leaves it the process's:
// docs/decisions.md, "Sysmon's naps"): sysmon sleeps 20 µs between its
// checks after every wake and whenever it has just taken a P back from a
// system or cgo call (every V8 call is one), and it was the busiest
// sleeper of both the gateway and its workers under load. No timer of the
// program waits on sysmon's sleep; what its slack may delay is its own
// checks: taking a P back from a long system or cgo call, preempting a
// goroutine that ran 10 ms.

// A worker's sysmon naps with a slack of 5 ms, not 1 (docs/decisions.md,
// "A worker's sysmon naps longer"). A worker asked every few
// milliseconds (one of 50 tenants' workers) went idle after each request,
// and Go's sysmon then went into its deep sleep at its next check, to be
// woken by the next request's first system call and nap again: two of
// the worker's three context switches a request were sysmon's
// (docs/history/performance-log.md, "A sleeping worker's wakes"). A
// longer nap spans the next request more often, which then finds sysmon
// awake and wakes nobody. What the slack delays is sysmon's taking the
// worker's one P back from a long V8 call (a pinned worker runs one P):
// another isolate of the worker, a watchdog's timer, the read loop wait up
// to about two naps, ~10 ms, the order of Go's own 10 ms preemption of a
// goroutine that keeps its P.

// workerSysmonSlack is the slack a worker's sysmon sleeps with.
func workerSysmonSlack() int64 { return int64(C.retainer_worker_sysmon_slack_ns()) }

// workerSubcommand is the first argument that makes a process a worker,
// as the C constructor knows it.
func workerSubcommand() string { return C.GoString(C.retainer_worker_subcommand()) }

// sysmonThread is the thread id the slack of sysmon went to (0 before
// it started, or with the slack off).
func sysmonThread() int { return int(C.retainer_sysmon_thread()) }

// sysmonSlack is the slack sysmon sleeps with (0: the process's).
func sysmonSlack() int64 { return int64(C.retainer_sysmon_slack_ns()) }
