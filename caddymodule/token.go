package caddymodule

import (
	"fmt"
	"os"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/retainer-gw/retainer/authz"
)

// The operator's token command (README.md, Caddyfile), shipped in the binary the way
// Caddy ships `caddy hash-password`: whoever built Retainer with xcaddy has
// no source tree to `go run` from.
func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "retainer-token",
		Usage: "--sub <tenant> [--scope \"...\"] [--plan <name>] [--ttl 1h] [--iss ...] [--aud ...] [--secret-env NAME]",
		Short: "Prints an HS256 token for retainer_jwt's shared secret",
		Long: `
Prints a JSON Web Token (HS256) for the tenant --sub, signed with the shared
secret in $RETAINER_JWT_SECRET (or the variable --secret-env names), for a
retainer_jwt that says ` + "`secret {env.RETAINER_JWT_SECRET}`" + `. The secret is
read from the environment, never from a flag, so it stays out of shell
history and process lists.

	export RETAINER_JWT_SECRET="$(head -c 32 /dev/urandom | base64)"
	TOKEN=$(retainer retainer-token --sub alice)`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().String("sub", "", "the tenant (sub claim; required)")
			cmd.Flags().String("scope", authz.ScopeExecute+" "+authz.ScopeDeploy+" "+authz.ScopeRead, "space-separated scopes")
			cmd.Flags().Duration("ttl", time.Hour, "lifetime")
			cmd.Flags().String("iss", "https://id.example.com/", "issuer (iss claim)")
			cmd.Flags().String("aud", "retainer", "audience (aud claim)")
			cmd.Flags().String("secret-env", "RETAINER_JWT_SECRET", "the environment variable that holds the secret")
			cmd.Flags().String("plan", "", "the tenant's plan (docs/usage.md), as the claim --plan-claim names")
			cmd.Flags().String("plan-claim", "plan", "the claim that names the plan (the plans block's plan_claim)")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdToken)
		},
	})
}

func cmdToken(fl caddycmd.Flags) (int, error) {
	sub := fl.String("sub")
	if err := authz.ValidTenant(sub); err != nil {
		return exitFailed, fmt.Errorf("--sub: the tenant %s", err)
	}
	env := fl.String("secret-env")
	secret := os.Getenv(env)
	if len(secret) < 32 {
		return exitFailed, fmt.Errorf("$%s must hold a secret of at least 32 bytes", env)
	}
	ttl := fl.Duration("ttl")
	if ttl <= 0 {
		return exitFailed, fmt.Errorf("--ttl must be positive")
	}
	now := time.Now()
	claims := jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
	for name, v := range map[string]string{"scope": fl.String("scope"), "iss": fl.String("iss"), "aud": fl.String("aud"), fl.String("plan-claim"): fl.String("plan")} {
		if v != "" {
			claims[name] = v
		}
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		return exitFailed, err
	}
	fmt.Println(tok)
	return 0, nil
}

// exitFailed is the exit code of a command that failed.
const exitFailed = 1
