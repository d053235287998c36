package sandbox

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"

	v8 "rogchap.com/v8go"

	"github.com/retainer-gw/retainer/internal/wirejson"
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

// hostECGenerate is ecGenerate(curve) → the key pair.
func (m *vm) hostECGenerate(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 1 {
		return nil, errors.New("ecGenerate needs a curve")
	}
	curve := curveByName(args[0].String())
	if curve == nil {
		return nil, errors.New("NotSupportedError: the curves are P-256 and P-384")
	}
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		return nil, errors.New("OperationError: key generation failed")
	}
	pair, err := ecKeyPair(k)
	if err != nil {
		return nil, errors.New("OperationError: key encoding failed")
	}
	return v8.NewValue(m.iso, pair)
}

// hostECImportPrivate is ecImportPrivate(format, data, curve) → the key
// pair; format "pkcs8" (DER, Latin-1) or "jwk" (JSON with d, x, y).
func (m *vm) hostECImportPrivate(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 3 {
		return nil, errors.New("ecImportPrivate needs a format, data and a curve")
	}
	format, data, curveName := args[0].String(), args[1].String(), args[2].String()
	curve := curveByName(curveName)
	if curve == nil {
		return nil, errors.New("NotSupportedError: the curves are P-256 and P-384")
	}
	var k *ecdsa.PrivateKey
	switch format {
	case "pkcs8":
		parsed, err := x509.ParsePKCS8PrivateKey(wirejson.Latin1Bytes(data))
		ek, ok := parsed.(*ecdsa.PrivateKey)
		if err != nil || !ok {
			return nil, errors.New("DataError: not a PKCS #8 EC private key")
		}
		k = ek
	case "jwk":
		var j struct{ Kty, Crv, D, X, Y string }
		if json.Unmarshal([]byte(data), &j) != nil || j.Kty != "EC" || j.Crv != curveName {
			return nil, errors.New("DataError: the JWK is not an EC key on that curve")
		}
		dec := func(s string) (*big.Int, error) {
			b, err := base64.RawURLEncoding.DecodeString(s)
			return new(big.Int).SetBytes(b), err
		}
		d, err1 := dec(j.D)
		x, err2 := dec(j.X)
		y, err3 := dec(j.Y)
		if err1 != nil || err2 != nil || err3 != nil || d.Sign() == 0 {
			return nil, errors.New("DataError: the JWK's d, x and y must be base64url")
		}
		k = &ecdsa.PrivateKey{PublicKey: ecdsa.PublicKey{Curve: curve, X: x, Y: y}, D: d}
		if cx, cy := curve.ScalarBaseMult(d.Bytes()); cx.Cmp(x) != 0 || cy.Cmp(y) != 0 {
			return nil, errors.New("DataError: the JWK's public point does not match d")
		}
	default:
		return nil, errors.New("NotSupportedError: private EC keys import as pkcs8 or jwk")
	}
	if k.Curve != curve {
		return nil, errors.New("DataError: the key is on another curve")
	}
	pair, err := ecKeyPair(k)
	if err != nil {
		return nil, errors.New("DataError: the key cannot be encoded")
	}
	return v8.NewValue(m.iso, pair)
}

// hostECSign is ecSign(hash, pkcs8, data) → the P1363 signature.
func (m *vm) hostECSign(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 3 {
		return nil, errors.New("ecSign needs a hash, a key and data")
	}
	newHash, err := hashFor(args[0].String())
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParsePKCS8PrivateKey(wirejson.Latin1Bytes(args[1].String()))
	k, ok := parsed.(*ecdsa.PrivateKey)
	if err != nil || !ok {
		return nil, errors.New("InvalidAccessError: bad key")
	}
	h := newHash()
	h.Write(wirejson.Latin1Bytes(args[2].String()))
	r, s, err := ecdsa.Sign(rand.Reader, k, h.Sum(nil))
	if err != nil {
		return nil, errors.New("OperationError: signing failed")
	}
	size := (k.Curve.Params().BitSize + 7) / 8
	sig := make([]byte, 2*size)
	r.FillBytes(sig[:size])
	s.FillBytes(sig[size:])
	return v8.NewValue(m.iso, wirejson.Latin1(sig))
}
