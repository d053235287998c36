package client_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/retainer-gw/retainer/client"
)

// A Go host runs a program on the gateway; the program's tool call runs
// here, in the host's process.
func Example() {
	ctx := context.Background()
	exec, err := client.Dial(ctx, gatewayURL, client.Options{Token: token("example-tenant")})
	if err != nil {
		panic(err)
	}
	defer exec.Close()

	store := client.Provider{Name: "store", Tools: map[string]client.ToolFunc{
		"listProducts": func(ctx context.Context, args []json.RawMessage) (any, error) {
			var q struct{ Max int }
			json.Unmarshal(args[0], &q)
			return []string{"tea", "coffee", "cocoa"}[:q.Max], nil
		},
	}}
	out, err := exec.Execute(ctx, client.Request{
		Code:      `async () => { const p = await store.listProducts({max: 2}); return p.join(" and "); }`,
		Providers: []client.Provider{store},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out.Result))
	// Output: "tea and coffee"
}
