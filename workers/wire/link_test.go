package wire

import (
	"io"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// linkPair is LinkPair, closed when the test ends.
func linkPair(t *testing.T) (gateway, worker *Link) {
	gateway, worker, err := LinkPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gateway.Close(); worker.Close() })
	return gateway, worker
}

// watch registers c's descriptor in an epoll set of the test's own, as
// Go's poller registers every socket (both readiness kinds, edge-
// triggered), and answers a function that tells the events since the
// last call.
func watch(t *testing.T, c any) func() uint32 {
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(ep) })
	raw.Control(func(fd uintptr) {
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET})
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() uint32 {
		events := make([]unix.EpollEvent, 4)
		n, err := unix.EpollWait(ep, events, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got uint32
		for _, e := range events[:n] {
			got |= e.Events
		}
		return got
	}
}

// Each side of a link reads what the other wrote, and a worker's answer,
// once the gateway has read it, gives the worker's poller nothing to wake
// for (Link). The gateway's side, whose writing end its poller watches,
// shows what the single socket did: an edge for room to write again.
func TestLinkAnswersWakeNoReader(t *testing.T) {
	gateway, worker := linkPair(t)
	workerIn := watch(t, worker.in)
	gatewayOut := watch(t, gateway.out)
	workerIn()
	gatewayOut() // the state at registration

	buf := make([]byte, 5)
	if _, err := gateway.Write([]byte("call!")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(worker, buf); err != nil || string(buf) != "call!" {
		t.Fatalf("the worker read %q, %v", buf, err)
	}
	if ev := gatewayOut(); ev&unix.EPOLLOUT == 0 {
		t.Fatalf("the worker's read gave the gateway's writing end events %#x, want EPOLLOUT (the check below would prove nothing)", ev)
	}
	workerIn() // the call's own arrival

	if _, err := worker.Write([]byte("done!")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(gateway, buf); err != nil || string(buf) != "done!" {
		t.Fatalf("the gateway read %q, %v", buf, err)
	}
	if ev := workerIn(); ev != 0 {
		t.Fatalf("the gateway's read of an answer gave the worker's reading end events %#x: it would wake for nothing", ev)
	}
}

// The worker writes with blocking system calls on a descriptor the poller
// never sees; its reading end is in the poller (nonblocking).
func TestWorkerLinkWritesOutsideThePoller(t *testing.T) {
	_, worker := linkPair(t)
	var flags int
	var err error
	raw, _ := worker.out.(syscall.Conn).SyscallConn()
	raw.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil || flags&unix.O_NONBLOCK != 0 {
		t.Fatalf("the worker's writing end: flags %#x, %v; want blocking", flags, err)
	}
}
