package workers

// A worker's life from the outside: its start (spawn, its stderr into
// Caddy's log, the handshake), its end (reap, kill).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/retainer-gw/retainer/workers/wire"
)

// spawn starts a worker process and completes the handshake.
func (pool *Pool) spawn(index int) (*process, error) { return pool.spawnThen(index, nil) }

// spawnThen is spawn, calling started (when not nil) with the process's
// pid once it runs, before its handshake (a spare's start: spares.go).
func (pool *Pool) spawnThen(index int, started func(pid int)) (*process, error) {
	conn, child, err := wire.NewLink()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range child {
			f.Close()
		}
	}()
	stderr, err := pool.stderrSink(index)
	if err != nil {
		conn.Close()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", pool.cfg.Command...)
	cmd.Env = []string{} // nothing of the gateway's environment crosses
	cmd.Dir = "/"
	cmd.ExtraFiles = child // wire.FdIn, wire.FdOut
	cmd.Stdin = nil
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL, // dies with the gateway
		Setpgid:   true,            // its own process group: kill(0) reaches no one else
	}
	netns := pool.netnsAvailable()
	if netns {
		setNetNamespace(cmd.SysProcAttr)
	}
	cpu := pool.cpus.reserve()
	err = startPinned(cmd, cpu)
	if err != nil && netns {
		// The kernel (or a container around us) refuses new namespaces:
		// say so once, and start workers without them.
		pool.noNetns.Store(true)
		pool.logf("workers start without a network namespace of their own (%v); the seccomp filter still refuses sockets", err)
		cmd = exec.Command("/proc/self/exe", pool.cfg.Command...)
		cmd.Env, cmd.Dir, cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = []string{}, "/", child, stderr, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		err = startPinned(cmd, cpu)
	}
	if err != nil {
		pool.cpus.started(cpu, nil)
		conn.Close()
		stderr.Close()
		return nil, fmt.Errorf("starting a worker: %w", err)
	}
	stderr.Close() // the child holds its copy
	p := &process{
		pool:     pool,
		index:    index,
		cmd:      cmd,
		pid:      cmd.Process.Pid,
		exited:   make(chan struct{}),
		retained: map[string]isolateInfo{},
		pending:  map[string]bool{},
		running:  map[uint64]*callRecord{},
		streams:  map[string]bool{},
		visitor:  map[string]*visitorTime{},
	}
	p.rpc = wire.NewConn(conn, wire.WorkerFrameCap(pool.cfg.Engine), wire.MaxGatewayFrame, p.serveWorker, func(reason string) { p.kill("sent " + reason) })
	p.rpc.ReadDrained()
	p.rpc.Start()
	go p.reap()
	if started != nil {
		started(p.pid)
	}
	if hold := pool.startHold.Load(); hold != nil {
		(*hold)(p.pid)
	}
	if err := p.handshake(); err != nil {
		pool.cpus.started(cpu, nil)
		p.kill("handshake failed")
		<-p.exited
		return nil, err
	}
	pool.cpus.started(cpu, p)
	return p, nil
}

// stderrSink forwards a worker's output to the pool's log, line by line and
// bounded: it is the output of a process that may be hostile. At most
// stderrBurst lines at once and one a second after them are relayed (a
// crash's stack trace, ~400 lines, once went whole into the gateway's
// log); the lines left out are counted in the log.
func (pool *Pool) stderrSink(index int) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		defer r.Close()
		s := bufio.NewScanner(io.LimitReader(r, 1<<20))
		s.Buffer(make([]byte, 4096), 4096)
		lines := newStderrLimiter()
		left := 0
		for s.Scan() {
			if !lines.Allow() {
				left++
				continue
			}
			if left > 0 {
				pool.logf("worker %d: %d lines of its output were not logged", index, left)
				left = 0
			}
			pool.logf("worker %d: %s", index, s.Text())
		}
		if left > 0 {
			pool.logf("worker %d: %d lines of its output were not logged", index, left)
		}
		io.Copy(io.Discard, r)
	}()
	return w, nil
}

// newStderrLimiter relays stderrBurst lines at once and one a second
// after them.
func newStderrLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Every(time.Second), stderrBurst)
}

func (p *process) handshake() error {
	var rep wire.HelloReply
	ctx, cancel := context.WithTimeout(context.Background(), wire.HandshakeTimeout)
	defer cancel()
	hello := wire.HelloRequest{Version: wire.ProtocolVersion, Config: p.pool.workerConfig()}
	// The first worker's snapshot and caches (startup.go).
	hello.Startup = p.pool.startup.Load()
	hello.WantStartup = hello.Startup == nil
	err := p.post(ctx, wire.PathHello, hello, &rep)
	if err == nil && rep.Error != "" {
		err = fmt.Errorf("worker start-up: %s", rep.Error)
	} else if err != nil {
		err = fmt.Errorf("worker handshake: %w", err)
	}
	if err != nil {
		// Whatever failed, the next worker makes its own startup.
		p.pool.dropStartup(hello.Startup)
		return err
	}
	if rep.Version != wire.ProtocolVersion {
		return fmt.Errorf("worker speaks %q, want %q", rep.Version, wire.ProtocolVersion)
	}
	if rep.PID != p.pid {
		return fmt.Errorf("worker says it is pid %d, it is %d", rep.PID, p.pid)
	}
	if hello.WantStartup {
		p.pool.keepStartup(rep.Startup)
	}
	p.fromStartup = rep.FromStartup
	return nil
}

// reap waits for the process to end and reports its death.
func (p *process) reap() {
	err := p.cmd.Wait()
	p.rpc.Close()
	p.mu.Lock()
	p.dead = true
	lost := make([]string, 0, len(p.retained))
	for id := range p.retained {
		lost = append(lost, id)
	}
	// Blame (docs/architecture.md): when the gateway killed the worker because one call
	// overran, that call answers TIMEOUT and its handle alone takes the
	// strike; the other isolates lost here are rebuilt without one. A
	// worker killed from outside (a signal the gateway did not send) or on
	// an operator's word strikes nobody. Only a death the worker raised
	// itself (a native crash, a V8 abort, an exit, or a protocol violation
	// the gateway killed it for) makes the running isolates suspects.
	operator := p.operatorKill
	outside := operator || p.killedBy == "" && killedFromOutside(p.cmd.ProcessState)
	suspects := []string{}
	seen := map[string]bool{}
	for _, c := range p.running {
		if p.overrunner == 0 && !outside && c.handleID != "" && !seen[c.handleID] {
			seen[c.handleID] = true
			suspects = append(suspects, c.handleID)
		}
	}
	p.stopClock()
	p.retained = map[string]isolateInfo{}
	p.mu.Unlock()
	p.stat.close()
	close(p.exited)
	reason := "exited"
	if err != nil {
		reason = err.Error()
	}
	switch {
	case operator:
		reason = "by the gateway, as an operator asked"
	case outside:
		reason += ", a signal the gateway did not send: the kernel's OOM killer or an operator"
	}
	p.pool.died(p, Crash{Worker: p.index, PID: p.pid, Lost: lost, Suspects: suspects, Reason: reason, Killed: outside})
}

// killedFromOutside reports a process ended by a signal that someone else
// sent it: SIGKILL (the kernel's OOM killer, an operator) or SIGTERM (an
// operator). A worker's own crash ends it with SIGSEGV, SIGBUS, SIGILL or
// SIGABRT, or (the Go runtime catching those in V8's code, or its own
// fatal errors) with an exit status; the caller knows whether the gateway
// sent the signal.
func killedFromOutside(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGTERM)
}

// kill ends the process (SIGKILL); reap reports it.
func (p *process) kill(reason string) {
	p.mu.Lock()
	already := p.dead
	if !already && p.killedBy == "" {
		p.killedBy = reason
	}
	p.mu.Unlock()
	if already {
		return
	}
	p.pool.logf("worker %d (pid %d) killed: %s", p.index, p.pid, reason)
	p.cmd.Process.Kill()
}
