package files_test

import (
	"testing"

	"github.com/retainer-gw/retainer/objects"
	"github.com/retainer-gw/retainer/objects/files"
	"github.com/retainer-gw/retainer/objects/objectstest"
)

// The files backend keeps the same contract as every backend (the suite
// the S3 backend runs on a real SeaweedFS).
func TestContract(t *testing.T) {
	dir := t.TempDir() // one folder: the suite's handles share it, as two gateways share a bucket
	objectstest.Run(t, func() objects.Backend {
		b, err := files.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
