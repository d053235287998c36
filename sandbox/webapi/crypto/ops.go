// Package crypto is the Go half of the runtime's crypto (07-crypto.js:
// getRandomValues and randomUUID; 19-crypto-subtle.js: crypto.subtle):
// digests, HMAC, AES, ECDSA and RSA through Go's standard library, each
// key and its bytes crossing as Latin-1 strings. Keys live in the
// program's isolate as their encoded bytes; nothing is kept here between
// calls.
package crypto

import "github.com/retainer-gw/retainer/sandbox/webapi"

// API is crypto's Go half: the host operations crypto.subtle asks for,
// declared once. It keeps nothing between calls.
var API = webapi.API{Ops: []webapi.Op{
	{Name: "digest", Args: 2, Needs: "an algorithm and data", Do: digest},
	{Name: "hmac", Args: 3, Needs: "a hash, a key and data", Do: hmacSum},
	{Name: "aes", Args: 7, Needs: "mode, op, key, iv, data, additional data and a tag length", Do: aesCipher},
	{Name: "ecGenerate", Args: 1, Needs: "a curve", Do: ecGenerate},
	{Name: "ecImportPrivate", Args: 3, Needs: "a format, data and a curve", Do: ecImportPrivate},
	{Name: "ecSign", Args: 3, Needs: "a hash, a key and data", Do: ecSign},
	{Name: "rsaGenerate", Args: 2, Needs: "a size and an exponent", Do: rsaGenerate},
	{Name: "rsaImport", Args: 2, Needs: "a format and data", Do: rsaImport},
	{Name: "rsaSign", Args: 5, Needs: "a scheme, a hash, a key, data and a salt length", Do: rsaSign},
	{Name: "rsaJWK", Args: 2, Needs: "a key", Do: rsaJWK},
	{Name: "importPublic", Args: 4, Needs: "an algorithm, a format, data and a curve", Do: importPublic},
	{Name: "verifySig", Args: 5, Needs: "an algorithm, a hash, a key, a signature and data", Do: verify},
}}
