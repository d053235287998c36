package sqldb

import (
	"context"
	"errors"

	"github.com/ncruces/go-sqlite3"

	"github.com/retainer-gw/retainer/fault"
)

// call is one Serve waiting for its turn in a group.
type call struct {
	ctx       context.Context
	req       Request
	mayWrite  bool
	maxAnswer int
	res       any
	err       error
	tries     int
	epoch     uint64 // the fence of the gateway's claim when it came (a cluster)
	done      chan struct{}
}

// lead runs the calls queued on the database in groups, each group one
// transaction with a savepoint a call and one commit (one fsync) for all
// of it: a group commit. A call's answer waits for its group's commit. The
// leader runs one group and hands the next to a goroutine of its own, so no
// caller's answer waits behind others' later calls.
func (x *db) lead() {
	x.lock(context.Background())
	x.qmu.Lock()
	group := x.queue
	x.queue = nil
	x.qmu.Unlock()
	requeue := x.runGroup(group)
	x.unlock()
	x.qmu.Lock()
	x.queue = append(requeue, x.queue...)
	more := len(x.queue) > 0
	x.leading = more
	x.qmu.Unlock()
	if more {
		go x.lead()
	}
}

// runGroup runs a group's calls and answers them; it answers the calls to
// run again in the next group: those whose writes a lost transaction took
// (an interrupted write rolls back SQLite's whole transaction) before they
// were answered.
func (x *db) runGroup(group []*call) (requeue []*call) {
	group = x.fenceGroup(group)
	if len(group) == 0 {
		return nil
	}
	var ran []*call // succeeded, not yet committed
	current := -1
	err := x.guard(func(c *sqlite3.Conn) error {
		if err := x.internal("BEGIN IMMEDIATE"); err != nil {
			return err
		}
		for i, cl := range group {
			current = i
			if cl.ctx.Err() != nil {
				cl.err = timeoutFault()
				continue
			}
			if err := x.internal("SAVEPOINT call"); err != nil {
				return err
			}
			c.SetInterrupt(cl.ctx)
			cl.res, cl.err = x.serveOne(cl)
			c.SetInterrupt(context.Background())
			x.tenant = false
			if cl.err == nil {
				if err := x.internal("RELEASE call"); err != nil {
					return err
				}
				ran = append(ran, cl)
				continue
			}
			cl.err = x.fault(cl.ctx, cl.err)
			if c.GetAutocommit() {
				// SQLite rolled the whole transaction back: the calls
				// that had run lost their writes; they run again.
				requeue = append(requeue, ran...)
				ran = nil
				if err := x.internal("BEGIN IMMEDIATE"); err != nil {
					return err
				}
				continue
			}
			if err := x.internal("ROLLBACK TO call"); err != nil {
				return err
			}
			if err := x.internal("RELEASE call"); err != nil {
				return err
			}
		}
		current = len(group)
		return x.internal("COMMIT")
	})
	if err != nil {
		// The group's transaction is gone, and with it every write of
		// the calls that had run: they run again, as do those that had
		// not had their turn; the one that failed answers the error.
		if current >= 0 && current < len(group) && group[current].err == nil {
			group[current].err = err
		}
		if x.conn != nil && !x.conn.GetAutocommit() {
			x.conn.Exec("ROLLBACK")
		}
		requeue = append(requeue, ran...)
		requeue = append(requeue, group[min(current+1, len(group)):]...)
		if errors.Is(x.failure, errFenced) || errors.As(x.failure, new(*commitError)) {
			// Another gateway serves the database now, or the store did
			// not say whether the commit was applied (running the calls
			// again could apply them twice): nothing runs again.
			for _, cl := range requeue {
				cl.err = err
			}
			requeue = nil
		}
	}
	again := requeue[:0]
	for _, cl := range requeue {
		// A call runs at most three times: a commit that keeps failing
		// answers its error.
		if cl.tries++; cl.tries < 3 {
			cl.res, cl.err = nil, nil
			again = append(again, cl)
		} else if cl.err == nil {
			cl.err = err
			if cl.err == nil {
				cl.err = fault.New(fault.Overloaded, "The database's transaction was lost three times; nothing of this call was written. Retry.")
			}
		}
	}
	for _, cl := range group {
		if !contains(again, cl) {
			close(cl.done)
		}
	}
	return again
}

func contains(cs []*call, c *call) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// fenceGroup opens the database under the newest fence of the group's
// calls (in a cluster) and answers the others' calls, which came under a
// claim this gateway has since lost and made again, with a retryable
// fault: the calls to run.
func (x *db) fenceGroup(group []*call) []*call {
	if x.opts.Pages == nil {
		return group
	}
	newest := x.epoch
	for _, cl := range group {
		newest = max(newest, cl.epoch)
	}
	x.useEpoch(newest)
	run := group[:0:0]
	for _, cl := range group {
		if cl.epoch < newest {
			cl.err = fencedFault()
			close(cl.done)
			continue
		}
		run = append(run, cl)
	}
	return run
}

// serveOne runs one call's statements inside the group's transaction.
func (x *db) serveOne(cl *call) (any, error) {
	switch cl.req.Mode {
	case "exec":
		return x.exec(cl.ctx, cl.req.Statements[0].SQL, cl.mayWrite)
	case "batch":
		return x.batch(cl.ctx, cl.req.Statements, cl.mayWrite, cl.maxAnswer)
	}
	budget := cl.maxAnswer
	return x.run(cl.ctx, cl.req.Statements[0], cl.mayWrite, cl.req.Mode == "first", &budget)
}

// internal runs one of the package's own statements (kept prepared).
func (x *db) internal(sql string) error {
	st := x.own[sql]
	if st == nil {
		var err error
		if st, _, err = x.conn.Prepare(sql); err != nil {
			return err
		}
		x.own[sql] = st
	}
	defer st.Reset()
	return st.Exec()
}
