  // ------------------------------------------------------------ base64
  const b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  let b64index; // made on first decode
  function base64Index() {
    if (b64index === undefined) {
      b64index = new Uint8ArrayCtor(256).fill(255);
      for (let i = 0; i < 64; i++) b64index[b64chars.charCodeAt(i)] = i;
    }
    return b64index;
  }
  function bytesToBase64(b) {
    const native = nativeBase64Of(b);
    if (native !== undefined) return native;
    let out = '';
    let i = 0;
    const chunk = [];
    for (; i + 2 < b.length; i += 3) {
      const n = (b[i] << 16) | (b[i + 1] << 8) | b[i + 2];
      chunk.push(b64chars[n >> 18], b64chars[(n >> 12) & 63], b64chars[(n >> 6) & 63], b64chars[n & 63]);
      if (chunk.length >= 8192) { out += chunk.join(''); chunk.length = 0; }
    }
    out += chunk.join('');
    if (i < b.length) {
      const n = (b[i] << 16) | ((i + 1 < b.length ? b[i + 1] : 0) << 8);
      out += b64chars[n >> 18] + b64chars[(n >> 12) & 63] + (i + 1 < b.length ? b64chars[(n >> 6) & 63] : '=') + '=';
    }
    return out;
  }
  function base64ToBytes(s) {
    const l = nativeFromBase64(s);
    if (l !== undefined) return l === null ? null : bytesFromLatin1(l);
    s = s.replace(/[\t\n\f\r ]/g, '');
    if (s.length % 4 === 0) s = s.replace(/==?$/, '');
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) return null;
    const out = new Uint8ArrayCtor((s.length * 3) >> 2);
    const index = base64Index();
    let o = 0, acc = 0, bits = 0;
    for (let i = 0; i < s.length; i++) {
      acc = (acc << 6) | index[s.charCodeAt(i)];
      bits += 6;
      if (bits >= 8) { bits -= 8; out[o++] = (acc >> bits) & 255; }
    }
    return out;
  }
  hidden(G, 'btoa', function btoa(s) {
    s = StringCtor(s);
    const native = nativeBase64Of(s);
    if (native !== undefined) return native;
    const b = new Uint8ArrayCtor(s.length);
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c > 255) throw domException('The string to be encoded contains characters outside of the Latin1 range.', 'InvalidCharacterError');
      b[i] = c;
    }
    return bytesToBase64(b);
  });
  hidden(G, 'atob', function atob(s) {
    s = StringCtor(s);
    let l = nativeFromBase64(s); // null: not base64
    if (l === undefined) {
      const b = base64ToBytes(s);
      l = b === null ? null : latin1FromBytes(b);
    }
    if (l === null) throw domException('The string to be decoded is not correctly encoded.', 'InvalidCharacterError');
    return l;
  });

