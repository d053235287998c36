package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retainer-gw/retainer/store"
)

// Reading receipts back: one by id, or a tenant's list newest first,
// within a request's bound.

// ErrNotFound answers an unknown id and another tenant's id alike.
var ErrNotFound = errors.New("no such receipt")

// ErrUnavailable wraps a failure of the store under the receipts (its
// PostgreSQL stopped or unreachable, a read that failed): the receipt may
// well exist, and a later try may find it.
var ErrUnavailable = errors.New("receipts: the store is unavailable")

// Get answers the tenant's receipt id.
func (s *Store) Get(tenant, id string) (Receipt, error) {
	return s.GetWithin(context.Background(), tenant, id)
}

// GetWithin is Get, its store read within ctx (a request's bound: past
// it, ErrUnavailable).
func (s *Store) GetWithin(ctx context.Context, tenant, id string) (Receipt, error) {
	var r Receipt
	if v, ok := s.waiting(key(tenant, id)); ok {
		return r, json.Unmarshal(v, &r)
	}
	v, err := s.st.Get(ctx, table, key(tenant, id))
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if v == nil {
		return r, ErrNotFound
	}
	return r, json.Unmarshal(v, &r)
}

// Summary is one line of a receipt list.
type Summary struct {
	ID          string    `json:"resultId"`
	Status      string    `json:"status"`
	Code        string    `json:"errorCode,omitempty"`
	ExecutionID string    `json:"executionId,omitempty"`
	Received    time.Time `json:"received"`
	DurationMs  float64   `json:"durationMs"`
}

// List answers the tenant's receipts newest first, limit at a time; cursor
// is the last id of the previous page ("" for the first). The next cursor
// is "" at the end.
func (s *Store) List(tenant string, limit int, cursor string) ([]Summary, string, error) {
	return s.ListWithin(context.Background(), tenant, limit, cursor)
}

// ListWithin is List within ctx (a request's bound: past it,
// ErrUnavailable), the wait for a commit under way included: a listing
// does not queue behind a writer that waits for a stalled store.
func (s *Store) ListWithin(ctx context.Context, tenant string, limit int, cursor string) ([]Summary, string, error) {
	if limit <= 0 || limit > 100 {
		limit = 20
	}
	// A listing reads the file: what waits is written first.
	for !s.cmu.TryLock() {
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("%w: a commit of waiting receipts is under way: %v", ErrUnavailable, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	err := s.flushLocked(ctx)
	s.cmu.Unlock()
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	prefix := tenantPrefix(tenant)
	out := []Summary{}
	next := ""
	// Newest first, from just before the cursor's key.
	r := store.Range{Prefix: prefix, Reverse: true}
	if cursor != "" {
		r.To = key(tenant, cursor)
	}
	err = s.st.Scan(ctx, table, r, func(_, v []byte) bool {
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		var r Receipt
		if err := json.Unmarshal(v, &r); err != nil {
			return true
		}
		sum := Summary{ID: r.ID, Status: r.Outcome.Status, ExecutionID: r.ExecutionID, Received: r.Timing.Received, DurationMs: r.Timing.DurationMs}
		if r.Outcome.Error != nil {
			sum.Code = r.Outcome.Error.Code
		}
		out = append(out, sum)
		return true
	})
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return out, next, nil
}
