package sandbox

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/retainer-gw/retainer/program"
)

// TestSubtleVerify checks ECDSA P-256 and RSASSA-PKCS1-v1_5 signatures
// made in Go verify in the isolate, and altered ones do not.
func TestSubtleVerify(t *testing.T) {
	msg := []byte("webhook payload")
	digest := sha256.Sum256(msg)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	r, s, _ := ecdsa.Sign(rand.Reader, ec, digest[:])
	ecSig := make([]byte, 64)
	r.FillBytes(ecSig[:32])
	s.FillBytes(ecSig[32:])
	ecSPKI, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaSig, _ := rsa.SignPKCS1v15(rand.Reader, rk, crypto.SHA256, digest[:])
	rsaSPKI, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	b64 := base64.StdEncoding.EncodeToString
	u := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	point, _ := ec.PublicKey.Bytes() // 0x04 || X || Y
	code := fmt.Sprintf(`async () => {
		const bytes = (s) => Uint8Array.from(atob(s), c => c.charCodeAt(0));
		const msg = new TextEncoder().encode('webhook payload');
		const ecKey = await crypto.subtle.importKey('spki', bytes(%q), {name: 'ECDSA', namedCurve: 'P-256'}, false, ['verify']);
		const ecJwk = await crypto.subtle.importKey('jwk', {kty: 'EC', crv: 'P-256', x: %q, y: %q}, {name: 'ECDSA', namedCurve: 'P-256'}, false, ['verify']);
		const rsaKey = await crypto.subtle.importKey('spki', bytes(%q), {name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256'}, false, ['verify']);
		const ecSig = bytes(%q), rsaSig = bytes(%q);
		const bad = ecSig.slice(); bad[5] ^= 1;
		let wrongKind;
		try { await crypto.subtle.verify('RSASSA-PKCS1-v1_5', ecKey, rsaSig, msg); } catch (e) { wrongKind = e.name; }
		return [
			await crypto.subtle.verify({name: 'ECDSA', hash: 'SHA-256'}, ecKey, ecSig, msg),
			await crypto.subtle.verify({name: 'ECDSA', hash: 'SHA-256'}, ecJwk, ecSig, msg),
			await crypto.subtle.verify({name: 'ECDSA', hash: 'SHA-256'}, ecKey, bad, msg),
			await crypto.subtle.verify('RSASSA-PKCS1-v1_5', rsaKey, rsaSig, msg),
			await crypto.subtle.verify('RSASSA-PKCS1-v1_5', rsaKey, rsaSig, new TextEncoder().encode('other')),
			wrongKind, ecKey.type, rsaKey.algorithm.hash.name,
		];
	}`, b64(ecSPKI), u(point[1:33]), u(point[33:]), b64(rsaSPKI), b64(ecSig), b64(rsaSig))
	out, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: code}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[true,true,false,true,false,"InvalidAccessError","public","SHA-256"]`; string(out.Result) != want {
		t.Fatalf("got %s, want %s", out.Result, want)
	}
}

func TestTextStreaming(t *testing.T) {
	out, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: `() => {
		const bytes = new TextEncoder().encode('héllo €uro');
		const d = new TextDecoder();
		let s = '';
		for (let i = 0; i < bytes.length; i += 3) s += d.decode(bytes.subarray(i, i + 3), {stream: true});
		s += d.decode();
		const dest = new Uint8Array(4);
		const r = new TextEncoder().encodeInto('a€b', dest);
		return [s, r.read, r.written, [...dest]];
	}`}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `["héllo €uro",2,4,[97,226,130,172]]`; string(out.Result) != want {
		t.Fatalf("got %s, want %s", out.Result, want)
	}
}

// AES-GCM, AES-CBC and AES-CTR round trips, with tampering and a wrong key
// refused (OperationError), and a known GCM vector.
func TestAES(t *testing.T) {
	out := mustRun(t, `async () => {
		const enc = new TextEncoder(), dec = new TextDecoder();
		const data = enc.encode('attack at dawn, bring snacks');
		const results = {};
		for (const name of ['AES-GCM', 'AES-CBC', 'AES-CTR']) {
			const key = await crypto.subtle.generateKey({name, length: 256}, true, ['encrypt', 'decrypt']);
			const params = name === 'AES-CTR' ? {name, counter: new Uint8Array(16), length: 64} : {name, iv: new Uint8Array(name === 'AES-GCM' ? 12 : 16)};
			const ct = await crypto.subtle.encrypt(params, key, data);
			const pt = dec.decode(await crypto.subtle.decrypt(params, key, ct));
			let tamper = 'no error';
			if (name !== 'AES-CTR') {
				// GCM: a flipped tag bit; CBC: a cut block (a flipped bit could
				// still end in valid padding, 1 time in 256).
				const bad = name === 'AES-GCM' ? new Uint8Array(ct) : new Uint8Array(ct).slice(0, -1);
				if (name === 'AES-GCM') bad[bad.length - 1] ^= 1;
				try { await crypto.subtle.decrypt(params, key, bad); } catch (e) { tamper = e.name; }
			}
			const jwk = await crypto.subtle.exportKey('jwk', key);
			results[name] = [pt, tamper, jwk.alg];
		}
		// NIST GCM test case 2: K=0^128, IV=0^96, P=0^128.
		const k0 = await crypto.subtle.importKey('raw', new Uint8Array(16), 'AES-GCM', false, ['encrypt']);
		const c0 = new Uint8Array(await crypto.subtle.encrypt({name: 'AES-GCM', iv: new Uint8Array(12)}, k0, new Uint8Array(16)));
		results.vector = Array.from(c0, b => b.toString(16).padStart(2, '0')).join('');
		return results;
	}`)
	want := `{"AES-GCM":["attack at dawn, bring snacks","OperationError","A256GCM"],"AES-CBC":["attack at dawn, bring snacks","OperationError","A256CBC"],"AES-CTR":["attack at dawn, bring snacks","no error","A256CTR"],"vector":"0388dace60b6a392f328c2b971b2fe78ab6e47d42cec13bdf53a67b21257bddf"}`
	if string(out.Result) != want {
		t.Fatalf("AES: %s", out.Result)
	}
}

// ECDSA: a generated pair signs and verifies, a tampered message does not
// verify, a pkcs8 export imports back, and a JWK private key signs what its
// public half verifies.
func TestECDSASign(t *testing.T) {
	out := mustRun(t, `async () => {
		const data = new TextEncoder().encode('header.payload');
		const out = [];
		for (const [curve, hash] of [['P-256', 'SHA-256'], ['P-384', 'SHA-384']]) {
			const { privateKey, publicKey } = await crypto.subtle.generateKey({name: 'ECDSA', namedCurve: curve}, true, ['sign', 'verify']);
			const sig = await crypto.subtle.sign({name: 'ECDSA', hash}, privateKey, data);
			const ok = await crypto.subtle.verify({name: 'ECDSA', hash}, publicKey, sig, data);
			const bad = await crypto.subtle.verify({name: 'ECDSA', hash}, publicKey, sig, new TextEncoder().encode('header.payl0ad'));
			const pkcs8 = await crypto.subtle.exportKey('pkcs8', privateKey);
			const again = await crypto.subtle.importKey('pkcs8', pkcs8, {name: 'ECDSA', namedCurve: curve}, false, ['sign']);
			const sig2 = await crypto.subtle.sign({name: 'ECDSA', hash}, again, data);
			out.push([sig.byteLength, ok, bad, await crypto.subtle.verify({name: 'ECDSA', hash}, publicKey, sig2, data)]);
		}
		// A fixed P-256 key (x and y computed from d), and the same d with
		// another key's public point, which must be refused.
		const jwk = {kty: 'EC', crv: 'P-256', x: 'JO1DC_VbUT1nO96yqVNb8YibogMWt8ssj9zTc8QtvNU', y: 'Nqz6H2GrKVNp_sY1jkLGoIgX0PuU3Wq4x13I4s20H6c', d: 'jpsQnnGQmL-YBIffH1136cLSG8ymFxcNkFCVcOUYRDI'};
		let mismatch = 'accepted';
		try { await crypto.subtle.importKey('jwk', {...jwk, x: 'f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU', y: 'x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0'}, {name: 'ECDSA', namedCurve: 'P-256'}, false, ['sign']) } catch (e) { mismatch = e.name }
		out.push(mismatch);
		const priv = await crypto.subtle.importKey('jwk', jwk, {name: 'ECDSA', namedCurve: 'P-256'}, false, ['sign']);
		const pub = await crypto.subtle.importKey('jwk', {kty: 'EC', crv: 'P-256', x: jwk.x, y: jwk.y}, {name: 'ECDSA', namedCurve: 'P-256'}, false, ['verify']);
		const s = await crypto.subtle.sign({name: 'ECDSA', hash: 'SHA-256'}, priv, data);
		out.push(await crypto.subtle.verify({name: 'ECDSA', hash: 'SHA-256'}, pub, s, data));
		return out;
	}`)
	if string(out.Result) != `[[64,true,false,true],[96,true,false,true],"DataError",true]` {
		t.Fatalf("ECDSA: %s", out.Result)
	}
}

// TestRSASign: RSA keys made in the isolate sign what Go verifies
// (RSASSA-PKCS1-v1_5 and RSA-PSS), keys made in Go import as pkcs8 and jwk
// and sign the same way, a PSS signature made in Go verifies in the
// isolate, and an exported JWK is the Go key's own numbers.
func TestRSASign(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rk)
	b64 := base64.StdEncoding.EncodeToString
	u := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	msg := []byte("sign me")
	digest := sha256.Sum256(msg)
	pssSig, _ := rsa.SignPSS(rand.Reader, rk, crypto.SHA256, digest[:], &rsa.PSSOptions{SaltLength: 32, Hash: crypto.SHA256})
	rk.Precompute()
	jwk := fmt.Sprintf(`{kty: 'RSA', n: %q, e: 'AQAB', d: %q, p: %q, q: %q, dp: %q, dq: %q, qi: %q}`,
		u(rk.N.Bytes()), u(rk.D.Bytes()), u(rk.Primes[0].Bytes()), u(rk.Primes[1].Bytes()),
		u(rk.Precomputed.Dp.Bytes()), u(rk.Precomputed.Dq.Bytes()), u(rk.Precomputed.Qinv.Bytes()))
	code := fmt.Sprintf(`async () => {
		const bytes = (s) => Uint8Array.from(atob(s), c => c.charCodeAt(0));
		const b64 = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf)));
		const msg = new TextEncoder().encode('sign me');
		const pkcs1 = {name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256'}, pss = {name: 'RSA-PSS', hash: 'SHA-256'};
		const made = await crypto.subtle.generateKey({...pkcs1, modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1])}, true, ['sign', 'verify']);
		const madeSig = await crypto.subtle.sign('RSASSA-PKCS1-v1_5', made.privateKey, msg);
		const pssMade = await crypto.subtle.generateKey({...pss, modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1])}, false, ['sign', 'verify']);
		const pssMadeSig = await crypto.subtle.sign({name: 'RSA-PSS', saltLength: 32}, pssMade.privateKey, msg);
		const fromPKCS8 = await crypto.subtle.importKey('pkcs8', bytes(%q), pss, false, ['sign']);
		const fromJWK = await crypto.subtle.importKey('jwk', %s, pkcs1, true, ['sign']);
		const pub = await crypto.subtle.importKey('spki', await crypto.subtle.exportKey('spki', made.publicKey), pss, false, ['verify']);
		const goPub = await crypto.subtle.importKey('jwk', {kty: 'RSA', n: %q, e: 'AQAB'}, pss, false, ['verify']);
		let badUsage;
		try { await crypto.subtle.sign('RSASSA-PKCS1-v1_5', made.publicKey, msg); } catch (e) { badUsage = e.name; }
		return {
			madeSPKI: b64(await crypto.subtle.exportKey('spki', made.publicKey)),
			madeSig: b64(madeSig),
			madeVerifies: await crypto.subtle.verify('RSASSA-PKCS1-v1_5', made.publicKey, madeSig, msg),
			pssMadeVerifies: await crypto.subtle.verify({name: 'RSA-PSS', saltLength: 32}, pssMade.publicKey, pssMadeSig, msg),
			pssSig: b64(await crypto.subtle.sign({name: 'RSA-PSS', saltLength: 32}, fromPKCS8, msg)),
			jwkSig: b64(await crypto.subtle.sign('RSASSA-PKCS1-v1_5', fromJWK, msg)),
			goPSSVerifies: await crypto.subtle.verify({name: 'RSA-PSS', saltLength: 32}, goPub, bytes(%q), msg),
			goPSSOther: await crypto.subtle.verify({name: 'RSA-PSS', saltLength: 32}, goPub, bytes(%q), new TextEncoder().encode('other')),
			jwkD: (await crypto.subtle.exportKey('jwk', fromJWK)).d,
			alg: [made.privateKey.algorithm.name, made.privateKey.algorithm.modulusLength, [...made.privateKey.algorithm.publicExponent], made.publicKey.type, pub.algorithm.name],
			badUsage,
		};
	}`, b64(pkcs8), jwk, u(rk.N.Bytes()), b64(pssSig), b64(pssSig))
	out, err := engine(t).Run(context.Background(), program.Job{Program: program.Program{Code: code}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		MadeSPKI, MadeSig, PSSSig, JWKSig, JWKD string
		MadeVerifies, PSSMadeVerifies           bool
		GoPSSVerifies, GoPSSOther               bool
		Alg                                     []any
		BadUsage                                string
	}
	if err := json.Unmarshal(out.Result, &r); err != nil {
		t.Fatalf("%v: %s", err, out.Result)
	}
	dec := func(s string) []byte { b, _ := base64.StdEncoding.DecodeString(s); return b }
	spki, err := x509.ParsePKIXPublicKey(dec(r.MadeSPKI))
	if err != nil {
		t.Fatal(err)
	}
	if err := rsa.VerifyPKCS1v15(spki.(*rsa.PublicKey), crypto.SHA256, digest[:], dec(r.MadeSig)); err != nil {
		t.Errorf("a generated key's PKCS #1 v1.5 signature does not verify in Go: %v", err)
	}
	if err := rsa.VerifyPSS(&rk.PublicKey, crypto.SHA256, digest[:], dec(r.PSSSig), &rsa.PSSOptions{SaltLength: 32, Hash: crypto.SHA256}); err != nil {
		t.Errorf("the imported pkcs8 key's PSS signature does not verify in Go: %v", err)
	}
	if err := rsa.VerifyPKCS1v15(&rk.PublicKey, crypto.SHA256, digest[:], dec(r.JWKSig)); err != nil {
		t.Errorf("the imported JWK's signature does not verify in Go: %v", err)
	}
	if !r.MadeVerifies || !r.PSSMadeVerifies || !r.GoPSSVerifies || r.GoPSSOther {
		t.Errorf("verify answers: %+v", r)
	}
	if r.JWKD != u(rk.D.Bytes()) {
		t.Errorf("exported d differs")
	}
	if got := fmt.Sprint(r.Alg); got != "[RSASSA-PKCS1-v1_5 2048 [1 0 1] public RSA-PSS]" {
		t.Errorf("algorithm: %s", got)
	}
	if r.BadUsage != "InvalidAccessError" {
		t.Errorf("signing with a public key: %q", r.BadUsage)
	}
}
