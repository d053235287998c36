package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"
)

// A cluster's configuration is checked as a whole: each misconfiguration
// fails validation with a message naming what is wrong (docs/cluster.md).
func TestClusterValidation(t *testing.T) {
	t.Parallel()
	const (
		etcd     = `"store_etcd": {"endpoints": ["http://127.0.0.1:2379"]}`
		pg       = `"receipts_postgres": {"dsn": "postgres://x@localhost/db"}`
		secret   = `"secret": "0123456789abcdef0123456789abcdef"`
		clusterA = `"cluster": {"listen": "127.0.0.1:7946", ` + secret + `}`
	)
	for _, tc := range []struct{ config, want string }{
		{`{` + etcd + `, ` + pg + `, ` + clusterA + `}`, ""},
		{`{` + etcd + `, ` + pg + `}`, "store etcd requires a cluster block"},
		{`{` + etcd + `, ` + clusterA + `}`, "store etcd requires receipts postgres"},
		{`{` + clusterA + `}`, "cluster requires store etcd"},
		{`{` + pg + `}`, "receipts postgres requires store etcd"},
		{`{"store_etcd": {}, ` + pg + `, ` + clusterA + `}`, "store etcd needs endpoints"},
		{`{` + etcd + `, "receipts_postgres": {}, ` + clusterA + `}`, "receipts postgres needs a dsn"},
		{`{` + etcd + `, ` + pg + `, "cluster": {` + secret + `}}`, "cluster needs listen"},
		{`{` + etcd + `, ` + pg + `, "cluster": {"listen": ":1", "secret": "short"}}`, "secret must be at least 32 bytes (it is 5)"},
		{`{` + etcd + `, ` + pg + `, "cluster": {"listen": ":1", ` + secret + `, "lease": 1000000000}}`, "lease must be at least 2s"},
		{`{"store_etcd": {"endpoints": ["x"], "prefix": "retainer"}, ` + pg + `, ` + clusterA + `}`, `prefix "retainer" must begin with /`},
	} {
		var a App
		if err := json.Unmarshal([]byte(tc.config), &a); err != nil {
			t.Fatal(err)
		}
		a.clusterDefaults()
		err := a.validateCluster()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.config, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.config, err, tc.want)
		}
	}
}
