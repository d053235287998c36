package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// SQL reaches a tenant's SQL database through the control plane
// (docs/sql.md, "The control plane"): POST /sql and GET /sql/export, as the
// token's tenant, in the registry of the API at API (the URL the executor
// socket's path /executor is under, e.g. https://api.example.com).
type SQL struct {
	API   string
	Token string
	// HTTP sends the requests; nil is http.DefaultClient.
	HTTP *http.Client
}

// Statement is one statement and its values (nil, a number, a string, a
// bool stored as 1 or 0, or BlobValue).
type Statement struct {
	SQL    string `json:"sql"`
	Params []any  `json:"params,omitempty"`
}

// BlobValue is a BLOB, as a value and as POST /sql answers one.
type BlobValue struct {
	Hex string `json:"blob"`
}

// SQLMeta is D1's meta of a statement.
type SQLMeta struct {
	Duration    float64 `json:"duration"`
	Changes     int64   `json:"changes"`
	LastRowID   int64   `json:"last_row_id"`
	ChangedDB   bool    `json:"changed_db"`
	RowsRead    int64   `json:"rows_read"`
	RowsWritten int64   `json:"rows_written"`
	SizeAfter   int64   `json:"size_after"`
}

// SQLResult is one statement's answer, D1's .all() shape; each row is
// its JSON object (columns in their order; a BLOB is {"blob": "<hex>"}).
type SQLResult struct {
	Success bool              `json:"success"`
	Meta    SQLMeta           `json:"meta"`
	Results []json.RawMessage `json:"results"`
}

// Query runs one statement.
func (s *SQL) Query(ctx context.Context, sql string, params ...any) (*SQLResult, error) {
	var out SQLResult
	if err := s.post(ctx, Statement{SQL: sql, Params: params}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Batch runs statements in one transaction: all of them, or (an error)
// none.
func (s *SQL) Batch(ctx context.Context, stmts ...Statement) ([]SQLResult, error) {
	var out []SQLResult
	if err := s.post(ctx, map[string]any{"batch": stmts}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Export answers the database as a SQLite file (a consistent copy); close
// it.
func (s *SQL) Export(ctx context.Context) (io.ReadCloser, error) {
	res, err := s.do(ctx, http.MethodGet, "/sql/export", nil)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

func (s *SQL) post(ctx context.Context, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	res, err := s.do(ctx, http.MethodPost, "/sql", data)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(out)
}

// do sends a request and answers a response of status 200, or the
// gateway's fault as an *Error.
func (s *SQL) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	h := http.Header{}
	if body != nil {
		rd = bytes.NewReader(body)
		h.Set("Content-Type", "application/json")
	}
	return send(ctx, s.HTTP, s.API, s.Token, method, path, rd, h)
}

// send sends a control-plane request as the token's tenant and answers a
// response of a 2xx status, or the gateway's fault as an *Error.
func send(ctx context.Context, hc *http.Client, api, token, method, path string, body io.Reader, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(api, "/")+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return finish(hc, token, req)
}

// finish sends req with the token and answers a 2xx response, or the
// gateway's fault as an *Error.
func finish(hc *http.Client, token string, req *http.Request) (*http.Response, error) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 == 2 {
		return res, nil
	}
	defer res.Body.Close()
	var f struct{ Error *Error }
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if json.Unmarshal(data, &f) == nil && f.Error != nil {
		return nil, f.Error
	}
	return nil, fmt.Errorf("client: %s %s answered %d: %.200s", req.Method, req.URL.Path, res.StatusCode, data)
}
