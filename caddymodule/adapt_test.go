package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

var updateGolden = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt runs testdata/*.caddyfiletest: a Caddyfile, a line of
// dashes, then the adapted JSON or "error: <text the error contains>".
func TestCaddyfileAdapt(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/*.caddyfiletest")
	if len(files) == 0 {
		t.Fatal("no adapt tests")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.SplitN(string(data), "\n----------\n", 2)
			if len(parts) != 2 {
				t.Fatal("no ---------- separator")
			}
			input, want := parts[0], strings.TrimSpace(parts[1])
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), nil)
			if strings.HasPrefix(want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
					t.Fatalf("want an error containing %q, got %v", strings.TrimPrefix(want, "error: "), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			json.Indent(&pretty, out, "", "\t")
			if *updateGolden {
				os.WriteFile(f, []byte(input+"\n----------\n"+pretty.String()+"\n"), 0o644)
				return
			}
			var got, exp any
			json.Unmarshal(out, &got)
			if err := json.Unmarshal([]byte(want), &exp); err != nil {
				t.Fatalf("expected JSON: %v", err)
			}
			g, _ := json.Marshal(got)
			e, _ := json.Marshal(exp)
			if !bytes.Equal(g, e) {
				t.Fatalf("adapted:\n%s", pretty.String())
			}
		})
	}
}
