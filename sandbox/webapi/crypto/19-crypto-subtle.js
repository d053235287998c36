  // ------------------------------------------------------------ crypto.subtle
  // crypto.subtle and CryptoKey are made on first use.
  const subtleParts = once(() => {
    const hostDigest = coldHost('digest');
    const hostHMAC = coldHost('hmac');
    function bufferSource(data) {
      if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return toBytes(data);
      throw new TypeErrorCtor('The data must be an ArrayBuffer or a view of one.');
    }
    function hashName(h) {
      const n = StringCtor(typeof h === 'object' && h !== null ? h.name : h).toUpperCase();
      if (!['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512'].includes(n)) throw domException('Unsupported hash ' + n, 'NotSupportedError');
      return n;
    }
    const keyData = new WeakMap();
    let makingKey = false;
    class CryptoKey {
      constructor() { if (!makingKey) throw new TypeErrorCtor('Illegal constructor'); }
      get type() { return keyData.get(this).type; }
      get extractable() { return keyData.get(this).extractable; }
      get algorithm() { return keyData.get(this).algorithm; }
      get usages() { return keyData.get(this).usages.slice(); }
    }
    function newHMACKey(raw, hash, extractable, usages) {
      for (const u of usages) if (u !== 'sign' && u !== 'verify') throw domException('Invalid usage ' + u + ' for HMAC', 'SyntaxError');
      makingKey = true;
      const k = new CryptoKey();
      makingKey = false;
      keyData.set(k, { type: 'secret', extractable: !!extractable, usages: [...usages],
        algorithm: freeze({ name: 'HMAC', hash: freeze({ name: hash }), length: raw.length * 8 }), raw: latin1Of(raw) });
      return k;
    }
    function latin1Of(bytes) { return latin1FromBytes(bytes); }
    function hmacKey(key, usage) {
      const d = key instanceof CryptoKey ? keyData.get(key) : null;
      if (!d || d.algorithm.name !== 'HMAC') throw domException('The key is not an HMAC key.', 'InvalidAccessError');
      if (!d.usages.includes(usage)) throw domException('The key does not allow ' + usage + '.', 'InvalidAccessError');
      return d;
    }
    function algName(a) { return StringCtor(typeof a === 'object' && a !== null ? a.name : a).toUpperCase(); }
    const subtle = {};
    hidden(subtle, 'digest', async function digest(algorithm, data) {
      const d = bytesFromLatin1(hostDigest(hashName(algorithm), latin1FromBytes(bufferSource(data))));
      return d.buffer;
    });
    const hostImportPublic = coldHost('importPublic');
    const hostVerifySig = coldHost('verifySig');
    function newPublicKey(name, params, spki, extractable, usages) {
      for (const u of usages) if (u !== 'verify') throw domException('A public key can only verify.', 'SyntaxError');
      makingKey = true;
      const k = new CryptoKey();
      makingKey = false;
      keyData.set(k, { type: 'public', extractable: !!extractable, usages: [...usages], algorithm: freeze(Object.assign({ name }, params)), spki });
      return k;
    }
    // hostCrypto calls a crypto host function; its errors ("DataError: ...")
    // become the DOMExceptions WebCrypto throws.
    function hostCrypto(f, ...args) {
      try { return f(...args); } catch (e) {
        const m = /^(\w+Error): (.*)$/.exec(StringCtor(e && e.message || e));
        throw m ? domException(m[2], m[1]) : e;
      }
    }
    // secretKeyBytes reads a secret key in the raw or jwk ("oct") format.
    function secretKeyBytes(format, key, what) {
      if (format === 'raw') return new Uint8ArrayCtor(bufferSource(key));
      if (format !== 'jwk') throw domException('Unsupported key format ' + format, 'NotSupportedError');
      if (!key || key.kty !== 'oct' || typeof key.k !== 'string') throw domException('A JWK ' + what + ' key needs kty "oct" and k.', 'DataError');
      const raw = base64ToBytes(key.k.replace(/-/g, '+').replace(/_/g, '/'));
      if (raw === null) throw domException('The JWK k is not base64url.', 'DataError');
      return raw;
    }
    // AES (GCM, CBC, CTR): secret keys whose bytes the host ciphers use.
    const aesNames = { 'AES-GCM': 'AES-GCM', 'AES-CBC': 'AES-CBC', 'AES-CTR': 'AES-CTR' };
    const aesUsages = ['encrypt', 'decrypt', 'wrapKey', 'unwrapKey'];
    function newAESKey(name, raw, extractable, usages) {
      if (![16, 24, 32].includes(raw.length)) throw domException('An AES key is 128, 192 or 256 bits.', 'DataError');
      for (const u of usages) if (!aesUsages.includes(u)) throw domException('Invalid usage ' + u + ' for ' + name, 'SyntaxError');
      makingKey = true;
      const k = new CryptoKey();
      makingKey = false;
      keyData.set(k, { type: 'secret', extractable: !!extractable, usages: [...usages], algorithm: freeze({ name, length: raw.length * 8 }), raw: latin1Of(raw) });
      return k;
    }
    const hostAES = coldHost('aes');
    function aesCall(op, algorithm, key, data) {
      const name = aesNames[algName(algorithm)];
      const d = key instanceof CryptoKey ? keyData.get(key) : null;
      if (!name || !d || d.algorithm.name !== name) throw domException('The key does not fit the algorithm.', 'InvalidAccessError');
      if (!d.usages.includes(op)) throw domException('The key does not allow ' + op + '.', 'InvalidAccessError');
      const iv = name === 'AES-CTR' ? algorithm.counter : algorithm.iv;
      if (iv === undefined) throw new TypeErrorCtor(name === 'AES-CTR' ? 'AES-CTR needs a counter.' : name + ' needs an iv.');
      const additional = algorithm.additionalData === undefined ? '' : latin1FromBytes(bufferSource(algorithm.additionalData));
      const tag = algorithm.tagLength === undefined ? 128 : +algorithm.tagLength;
      if (name === 'AES-GCM' && ![32, 64, 96, 104, 112, 120, 128].includes(tag)) throw domException('Invalid tagLength.', 'OperationError');
      return bytesFromLatin1(hostCrypto(hostAES, name, op, d.raw, latin1FromBytes(bufferSource(iv)), latin1FromBytes(bufferSource(data)), additional, tag)).buffer;
    }
    // ECDSA private keys: the host holds nothing; the key's PKCS #8 bytes
    // travel with each call (ecdsa.go beside it).
    const hostECGenerate = coldHost('ecGenerate'), hostECImportPrivate = coldHost('ecImportPrivate'), hostECSign = coldHost('ecSign');
    function ecPair(json, curve, extractable, usages) {
      const pair = JSONparse(json);
      const pkcs8 = latin1FromBytes(base64ToBytes(pair.pkcs8)), spki = latin1FromBytes(base64ToBytes(pair.spki));
      const algorithm = freeze({ name: 'ECDSA', namedCurve: curve });
      makingKey = true;
      const priv = new CryptoKey(), pub = new CryptoKey();
      makingKey = false;
      keyData.set(priv, { type: 'private', extractable: !!extractable, usages: usages.filter(u => u === 'sign'), algorithm, pkcs8 });
      keyData.set(pub, { type: 'public', extractable: true, usages: usages.filter(u => u === 'verify'), algorithm, spki });
      return { privateKey: priv, publicKey: pub };
    }
    // RSA key pairs (RSASSA-PKCS1-v1_5, RSA-PSS): like EC keys, DER bytes
    // that travel with each call (rsa.go beside it).
    const rsaNames = { 'RSASSA-PKCS1-V1_5': 'RSASSA-PKCS1-v1_5', 'RSA-PSS': 'RSA-PSS' };
    const hostRSAGenerate = coldHost('rsaGenerate'), hostRSAImport = coldHost('rsaImport'), hostRSASign = coldHost('rsaSign'), hostRSAJWK = coldHost('rsaJWK');
    function rsaKeys(json, name, hash, extractable, usages, publicExtractable) {
      const k = JSONparse(json);
      const algorithm = freeze({ name, modulusLength: k.bits, publicExponent: base64ToBytes(k.e), hash: freeze({ name: hash }) });
      const spki = latin1FromBytes(base64ToBytes(k.spki));
      makingKey = true;
      const priv = k.pkcs8 ? new CryptoKey() : null, pub = new CryptoKey();
      makingKey = false;
      if (priv) keyData.set(priv, { type: 'private', extractable: !!extractable, usages: usages.filter(u => u === 'sign'), algorithm, pkcs8: latin1FromBytes(base64ToBytes(k.pkcs8)) });
      keyData.set(pub, { type: 'public', extractable: publicExtractable, usages: usages.filter(u => u === 'verify'), algorithm, spki });
      return { privateKey: priv, publicKey: pub };
    }
    function rsaKeyOf(key, name, type, usage) {
      const d = key instanceof CryptoKey ? keyData.get(key) : null;
      if (!d || d.type !== type || d.algorithm.name !== name) throw domException('The key is not an ' + name + ' ' + type + ' key.', 'InvalidAccessError');
      if (!d.usages.includes(usage)) throw domException('The key does not allow ' + usage + '.', 'InvalidAccessError');
      return d;
    }
    function pssSalt(algorithm) {
      if (algorithm === null || typeof algorithm !== 'object' || algorithm.saltLength === undefined) throw new TypeErrorCtor('RSA-PSS needs a saltLength.');
      return +algorithm.saltLength >>> 0;
    }
    hidden(subtle, 'encrypt', async function encrypt(algorithm, key, data) { return aesCall('encrypt', algorithm, key, data); });
    hidden(subtle, 'decrypt', async function decrypt(algorithm, key, data) { return aesCall('decrypt', algorithm, key, data); });
    hidden(subtle, 'importKey', async function importKey(format, key, algorithm, extractable, usages) {
      const name = algName(algorithm);
      if (aesNames[name]) return newAESKey(aesNames[name], secretKeyBytes(format, key, 'AES'), extractable, usages);
      if (rsaNames[name]) {
        const hash = hashName(algorithm.hash);
        let data;
        if (format === 'jwk') {
          if (key === null || typeof key !== 'object') throw domException('A JWK is an object.', 'DataError');
          data = JSONstringify(key);
        } else if (format === 'pkcs8' || format === 'spki') data = latin1FromBytes(bufferSource(key));
        else throw domException('RSA keys import as pkcs8, spki or jwk.', 'NotSupportedError');
        const isPrivate = format === 'pkcs8' || (format === 'jwk' && key.d !== undefined);
        for (const u of usages) if (u !== (isPrivate ? 'sign' : 'verify')) throw domException('Invalid usage ' + u + ' for an RSA ' + (isPrivate ? 'private' : 'public') + ' key', 'SyntaxError');
        const pair = rsaKeys(hostCrypto(hostRSAImport, format, data), rsaNames[name], hash, extractable, [...usages], !!extractable);
        return isPrivate ? pair.privateKey : pair.publicKey;
      }
      if (name === 'ECDSA' && (format === 'pkcs8' || (format === 'jwk' && key && key.d !== undefined))) {
        for (const u of usages) if (u !== 'sign') throw domException('A private key can only sign.', 'SyntaxError');
        const curve = StringCtor(algorithm.namedCurve || '');
        const data = format === 'jwk' ? JSONstringify(key) : latin1FromBytes(bufferSource(key));
        return ecPair(hostCrypto(hostECImportPrivate, format, data, curve), curve, extractable, [...usages]).privateKey;
      }
      if (name === 'ECDSA' || name === 'RSASSA-PKCS1-V1_5') {
        const canonical = name === 'ECDSA' ? 'ECDSA' : 'RSASSA-PKCS1-v1_5';
        const curve = name === 'ECDSA' ? StringCtor(algorithm.namedCurve || '') : '';
        const data = format === 'jwk' ? JSONstringify(key) : latin1FromBytes(bufferSource(key));
        const spki = hostCrypto(hostImportPublic, name, format, data, curve);
        const params = name === 'ECDSA' ? { namedCurve: curve } : { hash: freeze({ name: hashName(algorithm.hash) }) };
        return newPublicKey(canonical, params, spki, extractable, usages);
      }
      if (name !== 'HMAC') throw domException('Unsupported algorithm ' + name, 'NotSupportedError');
      const hash = hashName(algorithm.hash);
      const raw = secretKeyBytes(format, key, 'HMAC');
      if (raw.length === 0) throw domException('An HMAC key cannot be empty.', 'DataError');
      return newHMACKey(raw, hash, extractable, usages);
    });
    hidden(subtle, 'generateKey', async function generateKey(algorithm, extractable, usages) {
      const rsaName = rsaNames[algName(algorithm)];
      if (rsaName) {
        for (const u of usages) if (u !== 'sign' && u !== 'verify') throw domException('Invalid usage ' + u + ' for ' + rsaName, 'SyntaxError');
        if (!usages.includes('sign')) throw domException('An RSA key pair needs the sign usage.', 'SyntaxError');
        const hash = hashName(algorithm.hash);
        const exponent = algorithm.publicExponent === undefined ? new Uint8ArrayCtor([1, 0, 1]) : bufferSource(algorithm.publicExponent);
        return rsaKeys(hostCrypto(hostRSAGenerate, +algorithm.modulusLength || 0, latin1FromBytes(exponent)), rsaName, hash, extractable, [...usages], true);
      }
      if (algName(algorithm) === 'ECDSA') {
        for (const u of usages) if (u !== 'sign' && u !== 'verify') throw domException('Invalid usage ' + u + ' for ECDSA', 'SyntaxError');
        if (!usages.includes('sign')) throw domException('An ECDSA key pair needs the sign usage.', 'SyntaxError');
        const curve = StringCtor(algorithm.namedCurve || '');
        return ecPair(hostCrypto(hostECGenerate, curve), curve, extractable, [...usages]);
      }
      const aesName = aesNames[algName(algorithm)];
      if (aesName) {
        const bits = +algorithm.length;
        if (![128, 192, 256].includes(bits)) throw domException('An AES key is 128, 192 or 256 bits.', 'OperationError');
        return newAESKey(aesName, randomBytes(bits / 8), extractable, usages);
      }
      if (algName(algorithm) !== 'HMAC') throw domException('generateKey makes HMAC, AES, ECDSA and RSA (RSASSA-PKCS1-v1_5, RSA-PSS) keys here.', 'NotSupportedError');
      const hash = hashName(algorithm.hash);
      const bits = algorithm.length || (hash === 'SHA-384' || hash === 'SHA-512' ? 1024 : 512);
      return newHMACKey(randomBytes(Math.ceil(bits / 8)), hash, extractable, usages);
    });
    hidden(subtle, 'exportKey', async function exportKey(format, key) {
      const d = key instanceof CryptoKey ? keyData.get(key) : null;
      if (!d) throw new TypeErrorCtor('Not a CryptoKey.');
      if (!d.extractable) throw domException('The key is not extractable.', 'InvalidAccessError');
      if (format === 'jwk' && (d.algorithm.name === 'RSASSA-PKCS1-v1_5' || d.algorithm.name === 'RSA-PSS')) {
        const j = JSONparse(hostCrypto(hostRSAJWK, d.type === 'private' ? d.pkcs8 : d.spki, d.type === 'private'));
        j.alg = (d.algorithm.name === 'RSA-PSS' ? 'PS' : 'RS') + d.algorithm.hash.name.slice(4);
        j.ext = true; j.key_ops = d.usages.slice();
        return j;
      }
      if (d.type === 'public' && format === 'spki') return bytesFromLatin1(d.spki).buffer;
      if (d.type === 'private' && format === 'pkcs8') return bytesFromLatin1(d.pkcs8).buffer;
      if (d.type !== 'secret') throw domException('Unsupported key format ' + format + ' for a ' + d.type + ' key', 'NotSupportedError');
      const raw = bytesFromLatin1(d.raw);
      if (format === 'raw') return raw.buffer;
      const k = bytesToBase64(raw).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
      if (format === 'jwk' && d.algorithm.name.startsWith('AES-')) return { kty: 'oct', k, alg: 'A' + d.algorithm.length + d.algorithm.name.slice(4), ext: true, key_ops: d.usages.slice() };
      if (format === 'jwk') return { kty: 'oct', k, alg: 'HS' + d.algorithm.hash.name.slice(4), ext: true, key_ops: d.usages.slice() };
      throw domException('Unsupported key format ' + format, 'NotSupportedError');
    });
    hidden(subtle, 'sign', async function sign(algorithm, key, data) {
      const rsaName = rsaNames[algName(algorithm)];
      if (rsaName) {
        const d = rsaKeyOf(key, rsaName, 'private', 'sign');
        const salt = rsaName === 'RSA-PSS' ? pssSalt(algorithm) : 0;
        return bytesFromLatin1(hostCrypto(hostRSASign, algName(algorithm), d.algorithm.hash.name, d.pkcs8, latin1FromBytes(bufferSource(data)), salt)).buffer;
      }
      if (algName(algorithm) === 'ECDSA') {
        const d = key instanceof CryptoKey ? keyData.get(key) : null;
        if (!d || d.type !== 'private' || d.algorithm.name !== 'ECDSA') throw domException('The key is not an ECDSA private key.', 'InvalidAccessError');
        if (!d.usages.includes('sign')) throw domException('The key does not allow sign.', 'InvalidAccessError');
        return bytesFromLatin1(hostCrypto(hostECSign, hashName(algorithm.hash), d.pkcs8, latin1FromBytes(bufferSource(data)))).buffer;
      }
      if (algName(algorithm) !== 'HMAC') throw domException('Signing is HMAC, ECDSA, RSASSA-PKCS1-v1_5 or RSA-PSS here.', 'NotSupportedError');
      const d = hmacKey(key, 'sign');
      return bytesFromLatin1(hostHMAC(d.algorithm.hash.name, d.raw, latin1FromBytes(bufferSource(data)))).buffer;
    });
    hidden(subtle, 'verify', async function verify(algorithm, key, signature, data) {
      const name = algName(algorithm);
      if (name === 'ECDSA' || rsaNames[name]) {
        const d = key instanceof CryptoKey ? keyData.get(key) : null;
        if (!d || d.type !== 'public' || d.algorithm.name.toUpperCase() !== name) throw domException('The key does not fit the algorithm.', 'InvalidAccessError');
        if (!d.usages.includes('verify')) throw domException('The key does not allow verify.', 'InvalidAccessError');
        const hash = name === 'ECDSA' ? hashName(algorithm.hash) : d.algorithm.hash.name;
        const salt = name === 'RSA-PSS' ? pssSalt(algorithm) : 0;
        return hostVerifySig(name, hash, d.spki, latin1FromBytes(bufferSource(signature)), latin1FromBytes(bufferSource(data)), salt) === '1';
      }
      if (name !== 'HMAC') throw domException('Unsupported algorithm ' + name, 'NotSupportedError');
      const d = hmacKey(key, 'verify');
      const mac = hostHMAC(d.algorithm.hash.name, d.raw, latin1FromBytes(bufferSource(data)));
      const sig = latin1FromBytes(bufferSource(signature));
      if (mac.length !== sig.length) return false;
      let diff = 0;
      for (let i = 0; i < mac.length; i++) diff |= mac.charCodeAt(i) ^ sig.charCodeAt(i);
      return diff === 0;
    });
    return { subtle, CryptoKey };
  });
  lazyProperty(cryptoObj, 'subtle', () => subtleParts().subtle);
  lazyGlobal('CryptoKey', () => subtleParts().CryptoKey);

