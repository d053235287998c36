package caddymodule

import (
	"context"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/objects"
	objectss3 "github.com/retainer-gw/retainer/objects/s3"
)

// ObjectsS3 is `objects s3 { ... }`: tenants' objects in an
// S3-compatible service rather than files under Caddy's data directory,
// which a cluster needs (docs/objects-s3.md). Every field takes
// placeholders such as {env.S3_SECRET}, resolved when the backend opens.
type ObjectsS3 struct {
	// Endpoint is the service's URL (http:// or https://, no path).
	Endpoint string `json:"endpoint"`
	// Bucket is the S3 bucket, created when missing.
	Bucket string `json:"bucket"`
	// Region is the bucket's region. Default us-east-1.
	Region string `json:"region,omitempty"`
	// AccessKey and SecretKey sign requests.
	AccessKey string `json:"access_key,omitempty"`
	SecretKey string `json:"secret_key,omitempty"`
	// Prefix is put before every object's name, so several deployments
	// can share a bucket.
	Prefix string `json:"prefix,omitempty"`
}

// parseObjects parses `objects s3 { endpoint; bucket; region; access_key;
// secret_key; prefix }`, the option's name just read.
func parseObjects(d *caddyfile.Dispenser) (*ObjectsS3, error) {
	if !d.NextArg() || d.Val() != "s3" || d.NextArg() {
		return nil, d.Err("objects: the one form is `objects s3 { endpoint; bucket; region; access_key; secret_key; prefix }`")
	}
	cfg := &ObjectsS3{}
	if err := blockOptions(d, "objects s3", "docs/objects-s3.md", map[string]func(string) error{
		"endpoint": into(&cfg.Endpoint), "bucket": into(&cfg.Bucket), "region": into(&cfg.Region),
		"access_key": into(&cfg.AccessKey), "secret_key": into(&cfg.SecretKey), "prefix": into(&cfg.Prefix),
	}); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, d.Err("objects s3: endpoint and bucket are required")
	}
	return cfg, nil
}

// objectsS3Backend opens the S3 backend the app is configured with, or
// answers nil when it has none (objects then live in files).
func (a *App) objectsS3Backend(ctx context.Context) (objects.Backend, error) {
	c := a.ObjectsS3
	if c == nil {
		return nil, nil
	}
	repl := caddy.NewReplacer()
	r := func(s string) string { return repl.ReplaceAll(s, "") }
	return objectss3.Open(ctx, objectss3.Config{
		Endpoint: r(c.Endpoint), Bucket: r(c.Bucket), Region: r(c.Region),
		AccessKey: r(c.AccessKey), SecretKey: r(c.SecretKey), Prefix: r(c.Prefix),
		// The part buffers puts hold are bounded (docs/objects.md).
		Buffers: budgets.ObjectPartBuffers, BuffersPerSpace: budgets.ObjectPartBuffersPerTenant, BufferWait: budgets.ObjectPartBufferWait,
	})
}
