package store

import (
	"strings"
	"testing"
)

// etcd older than 3.5 is refused naming its version; 3.5 and later, and
// the versions etcd reports with a "v" or a suffix, are taken.
func TestEtcdVersionOK(t *testing.T) {
	for _, v := range []string{"3.5.0", "3.5.17", "3.6.4", "v3.5.9", "3.7.0-alpha.0", "4.0.0"} {
		if err := etcdVersionOK(v); err != nil {
			t.Errorf("etcd %s refused: %v", v, err)
		}
	}
	for _, v := range []string{"3.4.27", "3.3.0", "2.3.8", "", "unknown"} {
		err := etcdVersionOK(v)
		if err == nil || !strings.Contains(err.Error(), "3.5") || v != "" && !strings.Contains(err.Error(), v) {
			t.Errorf("etcd %q: %v, want a refusal naming the version and 3.5", v, err)
		}
	}
}
