// Command mint-token prints an HS256 token for local testing of a gateway
// whose retainer_jwt uses `secret {env.RETAINER_JWT_SECRET}` (as
// Caddyfile.example does):
//
//	TOKEN=$(go run ./cmd/mint-token -sub alice)
//
// It reads the secret from RETAINER_JWT_SECRET, never from a flag, so the
// secret stays out of shell history and process lists.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func main() {
	sub := flag.String("sub", "alice", "the tenant (sub claim)")
	scope := flag.String("scope", "retainer:execute retainer:deploy retainer:read", "space-separated scopes")
	iss := flag.String("iss", "https://id.example.com/", "issuer")
	aud := flag.String("aud", "retainer", "audience")
	ttl := flag.Duration("ttl", time.Hour, "lifetime")
	flag.Parse()
	secret := os.Getenv("RETAINER_JWT_SECRET")
	if len(secret) < 32 {
		fmt.Fprintln(os.Stderr, "mint-token: RETAINER_JWT_SECRET must hold at least 32 bytes")
		os.Exit(2)
	}
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": *sub, "scope": *scope, "iss": *iss, "aud": *aud,
		"iat": now.Unix(), "exp": now.Add(*ttl).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mint-token:", err)
		os.Exit(1)
	}
	fmt.Println(tok)
}
