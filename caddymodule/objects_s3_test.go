package caddymodule

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/retainer-gw/retainer/internal/s3test"
	"github.com/retainer-gw/retainer/objects"
)

// TestObjectsS3Backend opens the configured backend on a real SeaweedFS
// with its keys given as {env.*} placeholders, and a second App (another
// gateway, nothing local) reads what the first wrote.
func TestObjectsS3Backend(t *testing.T) {
	if b, err := (&App{}).objectsS3Backend(context.Background()); b != nil || err != nil {
		t.Fatalf("no `objects s3`: %v %v", b, err)
	}
	s := s3test.Start(t)
	t.Setenv("RETAINER_TEST_S3_ENDPOINT", s.Endpoint)
	t.Setenv("RETAINER_TEST_S3_ACCESS", s.AccessKey)
	t.Setenv("RETAINER_TEST_S3_SECRET", s.SecretKey)
	cfg := ObjectsS3{Endpoint: "{env.RETAINER_TEST_S3_ENDPOINT}", Bucket: "gateway", Region: s.Region,
		AccessKey: "{env.RETAINER_TEST_S3_ACCESS}", SecretKey: "{env.RETAINER_TEST_S3_SECRET}", Prefix: "objects/"}
	one, err := (&App{ObjectsS3: &cfg}).objectsS3Backend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.Put(context.Background(), "tenant", "k", strings.NewReader("shared"), objects.Info{}); err != nil {
		t.Fatal(err)
	}
	other := cfg
	two, err := (&App{ObjectsS3: &other}).objectsS3Backend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := two.Get(context.Background(), "tenant", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "shared" {
		t.Errorf("the other gateway reads %q", got)
	}
	// A wrong secret fails the open, naming neither key.
	wrong := cfg
	wrong.SecretKey = "not-the-secret"
	_, err = (&App{ObjectsS3: &wrong}).objectsS3Backend(context.Background())
	if err == nil {
		t.Fatal("a wrong secret opened")
	}
	if strings.Contains(err.Error(), "not-the-secret") || strings.Contains(err.Error(), s.SecretKey) {
		t.Errorf("the error shows a secret: %v", err)
	}
}
