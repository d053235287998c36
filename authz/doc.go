// Package authz verifies the JSON Web Tokens that authorize tenants at the
// gateway and turns a valid one into an Identity: the tenant, its scopes and
// the claims an operator chose to expose.
//
// Keys come from a shared secret, PEM files or a JWKS URL. Each key pins the
// algorithms it may verify: an HMAC secret verifies only HS256/384/512, an
// RSA key only RS* and PS*, an EC key only the ES* of its curve, an Ed25519
// key only EdDSA; "none" never verifies. A token is also checked for exp,
// nbf and iat (with a leeway), iss, aud, required claims and its size.
//
// The package knows nothing of Caddy or HTTP: the Caddy provider
// (caddymodule) reads the token from the request and writes the RFC 6750
// challenge. It never logs a token; callers log Verify's error, which never
// contains one.
package authz
