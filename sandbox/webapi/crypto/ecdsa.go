package crypto

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"

	"github.com/retainer-gw/retainer/internal/wirejson"
	"github.com/retainer-gw/retainer/sandbox/webapi"
)

// ECDSA private keys for crypto.subtle: generateKey, importKey (pkcs8,
// jwk) and sign. A private key crosses as PKCS #8 DER; signatures are the
// IEEE P1363 form WebCrypto uses (r and s, each the curve's size).

// ecKeyPair answers {"pkcs8", "spki"} (base64) for a private key.
func ecKeyPair(k *ecdsa.PrivateKey) (string, error) {
	pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", err
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]string{"pkcs8": base64.StdEncoding.EncodeToString(pkcs8), "spki": base64.StdEncoding.EncodeToString(spki)})
	return string(b), err
}

// ecGenerate is ecGenerate(curve) → the key pair.
func ecGenerate(args []webapi.Arg) (string, error) {
	curve := curveByName(args[0].String())
	if curve == nil {
		return "", errors.New("NotSupportedError: the curves are P-256 and P-384")
	}
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		return "", errors.New("OperationError: key generation failed")
	}
	pair, err := ecKeyPair(k)
	if err != nil {
		return "", errors.New("OperationError: key encoding failed")
	}
	return pair, nil
}

// ecImportPrivate is ecImportPrivate(format, data, curve) → the key
// pair; format "pkcs8" (DER, Latin-1) or "jwk" (JSON with d, x, y).
func ecImportPrivate(args []webapi.Arg) (string, error) {
	format, data, curveName := args[0].String(), args[1].String(), args[2].String()
	curve := curveByName(curveName)
	if curve == nil {
		return "", errors.New("NotSupportedError: the curves are P-256 and P-384")
	}
	var k *ecdsa.PrivateKey
	switch format {
	case "pkcs8":
		ek, ok := pkcs8Key[*ecdsa.PrivateKey](data)
		if !ok {
			return "", errors.New("DataError: not a PKCS #8 EC private key")
		}
		k = ek
	case "jwk":
		var j struct{ Kty, Crv, D, X, Y string }
		if json.Unmarshal([]byte(data), &j) != nil || j.Kty != "EC" || j.Crv != curveName {
			return "", errors.New("DataError: the JWK is not an EC key on that curve")
		}
		dec := func(s string) (*big.Int, error) {
			b, err := base64.RawURLEncoding.DecodeString(s)
			return new(big.Int).SetBytes(b), err
		}
		d, err1 := dec(j.D)
		x, err2 := dec(j.X)
		y, err3 := dec(j.Y)
		if err1 != nil || err2 != nil || err3 != nil || d.Sign() == 0 {
			return "", errors.New("DataError: the JWK's d, x and y must be base64url")
		}
		k = &ecdsa.PrivateKey{PublicKey: ecdsa.PublicKey{Curve: curve, X: x, Y: y}, D: d}
		if cx, cy := curve.ScalarBaseMult(d.Bytes()); cx.Cmp(x) != 0 || cy.Cmp(y) != 0 {
			return "", errors.New("DataError: the JWK's public point does not match d")
		}
	default:
		return "", errors.New("NotSupportedError: private EC keys import as pkcs8 or jwk")
	}
	if k.Curve != curve {
		return "", errors.New("DataError: the key is on another curve")
	}
	return imported(ecKeyPair(k))
}

// ecSign is ecSign(hash, pkcs8, data) → the P1363 signature.
func ecSign(args []webapi.Arg) (string, error) {
	k, digest, err := signing[*ecdsa.PrivateKey](args[0].String(), args[1].String(), args[2].String())
	if err != nil {
		return "", err
	}
	r, s, err := ecdsa.Sign(rand.Reader, k, digest)
	if err != nil {
		return "", errors.New("OperationError: signing failed")
	}
	size := (k.Curve.Params().BitSize + 7) / 8
	sig := make([]byte, 2*size)
	r.FillBytes(sig[:size])
	s.FillBytes(sig[size:])
	return wirejson.Latin1(sig), nil
}
