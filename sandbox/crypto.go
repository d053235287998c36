package sandbox

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"hash"

	v8 "rogchap.com/v8go"
)

// Bytes cross between Go and the isolate as Latin-1 strings (one char per
// byte): v8go 0.9 cannot make an ArrayBuffer from Go bytes, and a string
// is one copy each way.

func latin1Bytes(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return b
}

func latin1String(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

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

// hostDigest(algorithm, data) → digest, for crypto.subtle.digest.
func (m *vm) hostDigest(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 2 {
		return nil, errors.New("digest needs an algorithm and data")
	}
	newHash, err := hashFor(args[0].String())
	if err != nil {
		return nil, err
	}
	h := newHash()
	h.Write(latin1Bytes(args[1].String()))
	return v8.NewValue(m.iso, latin1String(h.Sum(nil)))
}

// hostHMAC(hash, key, data) → MAC, for crypto.subtle.sign/verify with HMAC.
func (m *vm) hostHMAC(args []*v8.Value) (*v8.Value, error) {
	if len(args) < 3 {
		return nil, errors.New("hmac needs a hash, a key and data")
	}
	newHash, err := hashFor(args[0].String())
	if err != nil {
		return nil, err
	}
	mac := hmac.New(newHash, latin1Bytes(args[1].String()))
	mac.Write(latin1Bytes(args[2].String()))
	return v8.NewValue(m.iso, latin1String(mac.Sum(nil)))
}
