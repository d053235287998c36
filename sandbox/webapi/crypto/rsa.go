package crypto

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"

	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

// RSA keys for crypto.subtle (RSASSA-PKCS1-v1_5 and RSA-PSS): generateKey,
// importKey (pkcs8, jwk, spki), exportKey (pkcs8, spki, jwk), sign and
// verify. As with EC keys, the host keeps nothing: a private key travels
// with each call as PKCS #8 DER.

// RSA modulus sizes a program may generate or import: below 1024 bits is
// broken, and generating above 4096 would spend seconds of the run's CPU
// in one host call.
const (
	rsaMinBits = 1024
	rsaMaxBits = 4096
)

// rsaKeyJSON answers {"pkcs8", "spki", "bits", "e"} (base64 DER, the
// modulus length, the public exponent as base64 big-endian bytes); pkcs8
// is empty for a public key.
func rsaKeyJSON(priv *rsa.PrivateKey, pub *rsa.PublicKey) (string, error) {
	out := map[string]any{}
	if priv != nil {
		pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return "", err
		}
		out["pkcs8"] = base64.StdEncoding.EncodeToString(pkcs8)
		pub = &priv.PublicKey
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	out["spki"] = base64.StdEncoding.EncodeToString(spki)
	out["bits"] = pub.N.BitLen()
	out["e"] = base64.StdEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes())
	b, err := json.Marshal(out)
	return string(b), err
}

// rsaGenerate is rsaGenerate(bits, exponent as Latin-1 big-endian
// bytes) → the key pair. Go's generator uses 65537 only, which is what
// every WebCrypto caller asks for.
func rsaGenerate(args []webapi.Arg) (string, error) {
	bits := int(args[0].Integer())
	if bits < rsaMinBits || bits > rsaMaxBits || bits%8 != 0 {
		return "", errors.New("OperationError: modulusLength must be a multiple of 8 from 1024 to 4096")
	}
	if e := new(big.Int).SetBytes(wirejson.Latin1Bytes(args[1].String())); e.Cmp(big.NewInt(65537)) != 0 {
		return "", errors.New("OperationError: publicExponent must be 65537 ([1, 0, 1])")
	}
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		return "", errors.New("OperationError: key generation failed")
	}
	out, err := rsaKeyJSON(k, nil)
	if err != nil {
		return "", errors.New("OperationError: key encoding failed")
	}
	return out, nil
}

// rsaImport is rsaImport(format, data) → the key: format "pkcs8" (DER,
// Latin-1), "spki" (DER, Latin-1) or "jwk" (JSON; a private key has d, p,
// q, dp, dq, qi).
func rsaImport(args []webapi.Arg) (string, error) {
	format, data := args[0].String(), args[1].String()
	var priv *rsa.PrivateKey
	var pub *rsa.PublicKey
	switch format {
	case "pkcs8":
		k, ok := pkcs8Key[*rsa.PrivateKey](data)
		if !ok {
			return "", errors.New("DataError: not a PKCS #8 RSA private key")
		}
		priv = k
	case "spki":
		parsed, err := x509.ParsePKIXPublicKey(wirejson.Latin1Bytes(data))
		k, ok := parsed.(*rsa.PublicKey)
		if err != nil || !ok {
			return "", errors.New("DataError: not an SPKI RSA public key")
		}
		pub = k
	case "jwk":
		var j struct{ Kty, N, E, D, P, Q, Dp, Dq, Qi string }
		if json.Unmarshal([]byte(data), &j) != nil || j.Kty != "RSA" {
			return "", errors.New("DataError: the JWK is not an RSA key")
		}
		num := func(s string) (*big.Int, bool) {
			b, err := base64.RawURLEncoding.DecodeString(s)
			return new(big.Int).SetBytes(b), err == nil && len(b) > 0
		}
		n, okN := num(j.N)
		e, okE := num(j.E)
		if !okN || !okE || !e.IsInt64() || e.Int64() > 1<<31 {
			return "", errors.New("DataError: the JWK's n and e must be base64url")
		}
		pub = &rsa.PublicKey{N: n, E: int(e.Int64())}
		if j.D != "" {
			d, okD := num(j.D)
			p, okP := num(j.P)
			q, okQ := num(j.Q)
			if !okD || !okP || !okQ {
				return "", errors.New("DataError: a private RSA JWK needs d, p and q (base64url)")
			}
			priv = &rsa.PrivateKey{PublicKey: *pub, D: d, Primes: []*big.Int{p, q}}
			if priv.Validate() != nil {
				return "", errors.New("DataError: the JWK's values do not make an RSA key")
			}
			priv.Precompute()
			pub = nil
		}
	default:
		return "", errors.New("NotSupportedError: RSA keys import as pkcs8, spki or jwk")
	}
	k := pub
	if priv != nil {
		k = &priv.PublicKey
	}
	if bits := k.N.BitLen(); bits < rsaMinBits || bits > 16384 {
		return "", errors.New("DataError: the RSA modulus must be 1024 to 16384 bits")
	}
	return imported(rsaKeyJSON(priv, pub))
}

// rsaSign is rsaSign(scheme, hash, pkcs8, data, saltLength) → the
// signature; scheme "RSASSA-PKCS1-V1_5" or "RSA-PSS".
func rsaSign(args []webapi.Arg) (string, error) {
	k, digest, err := signing[*rsa.PrivateKey](args[1].String(), args[2].String(), args[3].String())
	if err != nil {
		return "", err
	}
	ch := cryptoHash(args[1].String())
	var sig []byte
	switch args[0].String() {
	case "RSASSA-PKCS1-V1_5":
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, ch, digest)
	case "RSA-PSS":
		salt := int(args[4].Integer())
		if salt < 0 || salt > k.Size()-len(digest)-2 {
			return "", errors.New("OperationError: saltLength is too large for this key and hash")
		}
		if salt == 0 {
			// Go's PSSOptions reads 0 as "as long as possible".
			return "", errors.New("NotSupportedError: RSA-PSS signing needs a saltLength above 0 here")
		}
		sig, err = rsa.SignPSS(rand.Reader, k, ch, digest, &rsa.PSSOptions{SaltLength: salt, Hash: ch})
	default:
		return "", errors.New("NotSupportedError: unknown RSA scheme")
	}
	if err != nil {
		return "", errors.New("OperationError: signing failed")
	}
	return wirejson.Latin1(sig), nil
}

// rsaJWK is rsaJWK(der, private) → the key as a JWK's members (n, e,
// and for a private key d, p, q, dp, dq, qi), JSON.
func rsaJWK(args []webapi.Arg) (string, error) {
	der := wirejson.Latin1Bytes(args[0].String())
	b64 := func(x *big.Int) string { return base64.RawURLEncoding.EncodeToString(x.Bytes()) }
	out := map[string]string{"kty": "RSA"}
	if args[1].Boolean() {
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		k, ok := parsed.(*rsa.PrivateKey)
		if err != nil || !ok || len(k.Primes) != 2 {
			return "", errors.New("NotSupportedError: the key cannot be exported as a JWK")
		}
		k.Precompute()
		out["n"], out["e"] = b64(k.N), b64(big.NewInt(int64(k.E)))
		out["d"], out["p"], out["q"] = b64(k.D), b64(k.Primes[0]), b64(k.Primes[1])
		out["dp"], out["dq"], out["qi"] = b64(k.Precomputed.Dp), b64(k.Precomputed.Dq), b64(k.Precomputed.Qinv)
	} else {
		parsed, err := x509.ParsePKIXPublicKey(der)
		k, ok := parsed.(*rsa.PublicKey)
		if err != nil || !ok {
			return "", errors.New("NotSupportedError: the key cannot be exported as a JWK")
		}
		out["n"], out["e"] = b64(k.N), b64(big.NewInt(int64(k.E)))
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
