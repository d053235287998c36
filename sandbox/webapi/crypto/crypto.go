package crypto

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash"
	"math/big"
	"strings"

	"github.com/retainer-gw/retainer/sandbox/webapi"

	"github.com/retainer-gw/retainer/internal/wirejson"
)

func hashFor(name string) (func() hash.Hash, error) {
	switch name {
	case "SHA-1":
		return sha1.New, nil
	case "SHA-256":
		return sha256.New, nil
	case "SHA-384":
		return sha512.New384, nil
	case "SHA-512":
		return sha512.New, nil
	}
	return nil, errors.New("NotSupportedError: unsupported hash " + name)
}

// digest is digest(algorithm, data) → digest, for crypto.subtle.digest.
func digest(args []webapi.Arg) (string, error) {
	newHash, err := hashFor(args[0].String())
	if err != nil {
		return "", err
	}
	h := newHash()
	h.Write(wirejson.Latin1Bytes(args[1].String()))
	return wirejson.Latin1(h.Sum(nil)), nil
}

// hmacSum is hmac(hash, key, data) → MAC, for crypto.subtle.sign/verify with HMAC.
func hmacSum(args []webapi.Arg) (string, error) {
	newHash, err := hashFor(args[0].String())
	if err != nil {
		return "", err
	}
	mac := hmac.New(newHash, wirejson.Latin1Bytes(args[1].String()))
	mac.Write(wirejson.Latin1Bytes(args[2].String()))
	return wirejson.Latin1(mac.Sum(nil)), nil
}

// importPublic is importPublic(algorithm, format, data, namedCurve) → SPKI DER: checks
// an ECDSA P-256/P-384 or RSA public key given as spki (DER), jwk (JSON) or
// raw (an uncompressed EC point), for crypto.subtle.importKey.
func importPublic(args []webapi.Arg) (string, error) {
	alg, format, data, curveName := args[0].String(), args[1].String(), args[2].String(), args[3].String()
	var pub any
	switch format {
	case "spki":
		k, err := x509.ParsePKIXPublicKey(wirejson.Latin1Bytes(data))
		if err != nil {
			return "", errors.New("DataError: the key is not SPKI")
		}
		pub = k
	case "jwk":
		var j struct{ Kty, Crv, X, Y, N, E string }
		if err := json.Unmarshal([]byte(data), &j); err != nil {
			return "", errors.New("DataError: the JWK is malformed")
		}
		b64 := func(s string) []byte { b, _ := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")); return b }
		switch j.Kty {
		case "EC":
			c := curveByName(j.Crv)
			if c == nil {
				return "", errors.New("NotSupportedError: unsupported curve " + j.Crv)
			}
			size := (c.Params().BitSize + 7) / 8
			x, y := b64(j.X), b64(j.Y)
			if len(x) != size || len(y) != size {
				return "", errors.New("DataError: the JWK's coordinates are not the curve's size")
			}
			k, err := ecdsa.ParseUncompressedPublicKey(c, append(append([]byte{4}, x...), y...))
			if err != nil {
				return "", errors.New("DataError: the JWK is not a point of the curve")
			}
			pub = k
		case "RSA":
			e := new(big.Int).SetBytes(b64(j.E))
			if !e.IsInt64() || e.Int64() > 1<<31 {
				return "", errors.New("DataError: bad RSA exponent")
			}
			pub = &rsa.PublicKey{N: new(big.Int).SetBytes(b64(j.N)), E: int(e.Int64())}
		default:
			return "", errors.New("NotSupportedError: unsupported JWK kty " + j.Kty)
		}
	case "raw":
		c := curveByName(curveName)
		if c == nil {
			return "", errors.New("NotSupportedError: raw keys are EC points of P-256 or P-384")
		}
		k, err := ecdsa.ParseUncompressedPublicKey(c, wirejson.Latin1Bytes(data))
		if err != nil {
			return "", errors.New("DataError: the raw key is not an uncompressed point of the curve")
		}
		pub = k
	default:
		return "", errors.New("NotSupportedError: unsupported key format " + format)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if alg != "ECDSA" || (curveName != "" && curveByName(curveName) != k.Curve) {
			return "", errors.New("DataError: the key does not fit the algorithm")
		}
	case *rsa.PublicKey:
		if (alg != "RSASSA-PKCS1-V1_5" && alg != "RSA-PSS") || k.N.BitLen() < 1024 {
			return "", errors.New("DataError: the key does not fit the algorithm")
		}
	default:
		return "", errors.New("NotSupportedError: unsupported key type")
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", errors.New("DataError: the key cannot be used")
	}
	return wirejson.Latin1(der), nil
}

func curveByName(name string) elliptic.Curve {
	switch name {
	case "P-256":
		return elliptic.P256()
	case "P-384":
		return elliptic.P384()
	}
	return nil
}

// verify is verifySig(algorithm, hash, spki, signature, data[, saltLength]) → "1"
// or "0", for ECDSA (signature as r||s, as WebCrypto has it),
// RSASSA-PKCS1-v1_5 and RSA-PSS.
func verify(args []webapi.Arg) (string, error) {
	newHash, err := hashFor(args[1].String())
	if err != nil {
		return "", err
	}
	pub, err := x509.ParsePKIXPublicKey(wirejson.Latin1Bytes(args[2].String()))
	if err != nil {
		return "", errors.New("InvalidAccessError: bad key")
	}
	h := newHash()
	h.Write(wirejson.Latin1Bytes(args[4].String()))
	digest := h.Sum(nil)
	sig := wirejson.Latin1Bytes(args[3].String())
	ok := false
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(sig) == 2*size {
			ok = ecdsa.Verify(k, digest, new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:]))
		}
	case *rsa.PublicKey:
		ch := cryptoHash(args[1].String())
		if args[0].String() == "RSA-PSS" {
			// saltLength 0 is Go's "any length" (PSSSaltLengthAuto): a
			// zero-salt signature still verifies, and so would a longer one.
			salt := 0
			if len(args) > 5 {
				salt = int(args[5].Integer())
			}
			ok = rsa.VerifyPSS(k, ch, digest, sig, &rsa.PSSOptions{SaltLength: salt, Hash: ch}) == nil
		} else {
			ok = rsa.VerifyPKCS1v15(k, ch, digest, sig) == nil
		}
	}
	res := "0"
	if ok {
		res = "1"
	}
	return res, nil
}

// imported answers an imported key as its encoding answers it, or the
// DataError the import throws when it cannot be encoded.
func imported(key string, err error) (string, error) {
	if err != nil {
		return "", errors.New("DataError: the key cannot be encoded")
	}
	return key, nil
}

// pkcs8Key parses a PKCS #8 private key of type K from its bytes (Latin-1);
// ok is false for anything else.
func pkcs8Key[K any](der string) (K, bool) {
	parsed, err := x509.ParsePKCS8PrivateKey(wirejson.Latin1Bytes(der))
	k, ok := parsed.(K)
	return k, ok && err == nil
}

// signing is what both signers start from: the PKCS #8 private key (of
// type K, else InvalidAccessError) and data's digest under the named hash,
// each as the runtime passes them (Latin-1).
func signing[K any](hashName, pkcs8, data string) (K, []byte, error) {
	var k K
	newHash, err := hashFor(hashName)
	if err != nil {
		return k, nil, err
	}
	k, ok := pkcs8Key[K](pkcs8)
	if !ok {
		return k, nil, errors.New("InvalidAccessError: bad key")
	}
	h := newHash()
	h.Write(wirejson.Latin1Bytes(data))
	return k, h.Sum(nil), nil
}

func cryptoHash(name string) crypto.Hash {
	switch name {
	case "SHA-1":
		return crypto.SHA1
	case "SHA-384":
		return crypto.SHA384
	case "SHA-512":
		return crypto.SHA512
	}
	return crypto.SHA256
}
