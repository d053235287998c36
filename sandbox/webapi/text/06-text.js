  // ------------------------------------------------------------ text
  // utf8Encode is s as UTF-8, a lone surrogate as U+FFFD.
  // The natives leave a Uint8Array of 64 bytes or fewer to JavaScript to
  // fill (natives.cc, bytesToWrite, says why).
  function utf8Encode(s) {
    s = StringCtor(s);
    const b = new Uint8ArrayCtor(nativeUtf8Length(s));
    if (nativeWriteUtf8(s, b) === undefined) fillLatin1(b, nativeLatin1OfUtf8(s));
    return b;
  }
  function fillLatin1(b, s) {
    for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
  }
  // utf8Decode is the Encoding Standard's UTF-8 decoder in JavaScript: what
  // fatal decoding runs when V8's answer holds a U+FFFD, and the reference
  // the native decoder is tested against (TestNativeUTF8MatchesTheStandard).
  // An invalid or cut sequence gives one U+FFFD for its maximal valid prefix.
  function utf8Decode(b, fatal) {
    let out = '';
    const parts = [];
    let needed = 0, seen = 0, cp = 0, lower = 0x80, upper = 0xbf;
    const bad = () => {
      if (fatal) throw new TypeErrorCtor('The encoded data was not valid for encoding utf-8');
      parts.push(0xfffd);
    };
    for (let i = 0; i < b.length;) {
      const c = b[i];
      if (needed === 0) {
        i++;
        if (c < 0x80) parts.push(c);
        else if (c >= 0xc2 && c <= 0xdf) { needed = 1; cp = c & 31; }
        else if (c >= 0xe0 && c <= 0xef) { if (c === 0xe0) lower = 0xa0; if (c === 0xed) upper = 0x9f; needed = 2; cp = c & 15; }
        else if (c >= 0xf0 && c <= 0xf4) { if (c === 0xf0) lower = 0x90; if (c === 0xf4) upper = 0x8f; needed = 3; cp = c & 7; }
        else bad();
      } else if (c < lower || c > upper) {
        // The byte is not consumed: it starts over.
        needed = seen = cp = 0; lower = 0x80; upper = 0xbf;
        bad();
      } else {
        i++;
        lower = 0x80; upper = 0xbf;
        cp = (cp << 6) | (c & 63);
        if (++seen === needed) {
          if (cp >= 0x10000) { cp -= 0x10000; parts.push(0xd800 + (cp >> 10), 0xdc00 + (cp & 1023)); }
          else parts.push(cp);
          needed = seen = cp = 0;
        }
      }
      if (parts.length >= 8192) { out += fromCharCode.apply(null, parts); parts.length = 0; }
    }
    if (needed !== 0) bad();
    return out + fromCharCode.apply(null, parts);
  }
  function toBytes(data) {
    if (data instanceof Uint8ArrayCtor) return data;
    if (data instanceof ArrayBuffer) return new Uint8ArrayCtor(data);
    if (ArrayBuffer.isView(data)) return new Uint8ArrayCtor(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeErrorCtor('The data must be an ArrayBuffer or a view of one.');
  }
  // Bodies are kept as "latin1" strings (one char per byte) where they can
  // be: that is how bytes cross to and from the host.
  function latin1FromBytes(b) {
    const native = nativeLatin1(b);
    if (native !== undefined) return native;
    let out = '';
    for (let i = 0; i < b.length; i += 8192) out += fromCharCode.apply(null, b.subarray(i, i + 8192));
    return out;
  }
  function bytesFromLatin1(s) {
    const b = new Uint8ArrayCtor(s.length);
    if (nativeWriteLatin1(s, b) === undefined) fillLatin1(b, s);
    return b;
  }
  // decodeUtf8 is b (a Uint8Array) decoded as UTF-8, each invalid sequence
  // as one U+FFFD, a byte order mark kept.
  function decodeUtf8(b) {
    const s = nativeUtf8(b);
    return s !== undefined ? s : utf8Decode(b, false);
  }
  // utf8Latin1 is str's UTF-8 bytes as a Latin-1 string (a character a
  // byte); textFromLatin1 decodes such a string back, without a leading
  // byte order mark.
  function utf8Latin1(str) {
    const l = nativeLatin1OfUtf8(str);
    return l !== undefined ? l : latin1FromBytes(utf8Encode(str));
  }
  function textFromLatin1(l) {
    let s = nativeUtf8OfLatin1(l);
    if (s === undefined) s = utf8Decode(bytesFromLatin1(l), false);
    return s.charCodeAt(0) === 0xfeff ? s.slice(1) : s;
  }

  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encodeInto(s, dest) {
      if (!(dest instanceof Uint8ArrayCtor)) throw new TypeErrorCtor('The destination must be a Uint8Array.');
      s = StringCtor(s);
      const done = nativeEncodeInto(s, dest);
      if (done !== undefined) return { read: done[0], written: done[1] };
      let read = 0, written = 0;
      for (const ch of s) {
        const bytes = utf8Encode(ch);
        if (written + bytes.length > dest.length) break;
        dest.set(bytes, written);
        written += bytes.length;
        read += ch.length;
      }
      return { read, written };
    }
    encode(s = '') { return utf8Encode(s); }
  }
  // UTF-8 is decoded here; every other encoding of the Encoding Standard
  // by golang.org/x/text behind host.decodeLegacy (encoding.go beside it).
  const hostEncodingName = coldHost('encodingName'), hostDecodeLegacy = coldHost('decodeLegacy');
  let nextDecoderId = 1;
  const asciiWhitespace = /^[\t\n\f\r ]+|[\t\n\f\r ]+$/g;
  class TextDecoder {
    #fatal;
    #ignoreBOM;
    #encoding;
    #id = nextDecoderId++;
    constructor(label = 'utf-8', options = {}) {
      const name = hostEncodingName(StringCtor(label).replace(asciiWhitespace, '').toLowerCase());
      if (name === '' || name === 'replacement') throw new RangeError('The encoding "' + StringCtor(label) + '" is not supported.');
      this.#encoding = name;
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return this.#encoding; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    #pending = new Uint8ArrayCtor(0);
    #seenStart = false;
    decode(data, options = {}) {
      const stream = !!(options && options.stream);
      let b = data === undefined ? new Uint8ArrayCtor(0) : toBytes(data);
      const first = !this.#seenStart;
      this.#seenStart = stream;
      if (this.#encoding !== 'utf-8') {
        let s = hostDecodeLegacy(this.#id, this.#encoding, latin1FromBytes(b), stream);
        if (first && !this.#ignoreBOM && (this.#encoding === 'utf-16le' || this.#encoding === 'utf-16be') && s.charCodeAt(0) === 0xfeff) s = s.slice(1);
        if (this.#fatal && s.indexOf('\ufffd') >= 0) throw new TypeErrorCtor('The encoded data was not valid for encoding ' + this.#encoding + '.');
        return s;
      }
      if (this.#pending.length) { const all = new Uint8ArrayCtor(this.#pending.length + b.length); all.set(this.#pending); all.set(b, this.#pending.length); b = all; this.#pending = new Uint8ArrayCtor(0); }
      if (stream) {
        // Keep an incomplete UTF-8 sequence at the end for the next call.
        let cut = b.length, i = b.length - 1, k = 0;
        while (i >= 0 && k < 3 && (b[i] & 0xc0) === 0x80) { i--; k++; }
        if (i >= 0 && b[i] >= 0xc0) {
          const need = b[i] >= 0xf0 ? 4 : b[i] >= 0xe0 ? 3 : 2;
          if (b.length - i < need) cut = i;
        }
        this.#pending = b.slice(cut);
        b = b.subarray(0, cut);
      }
      if (!first) return this.#decodeBody(b);
      if (!this.#ignoreBOM && b.length >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) b = b.subarray(3);
      return this.#decodeBody(b);
    }
    #decodeBody(b) {
      const s = nativeUtf8(b);
      if (s === undefined) return utf8Decode(b, this.#fatal);
      // A U+FFFD may be in the bytes or stand for an invalid sequence:
      // fatal decoding tells which the slow way, only then.
      return this.#fatal && s.indexOf('\ufffd') >= 0 ? utf8Decode(b, true) : s;
    }
  }
  // The stream classes over TransformStream, made on first use.
  const textStreamClasses = once(() => {
    // CompressionStream / DecompressionStream: TransformStreams whose chunks
    // go through Go's compress packages (compression.go beside it).
    const hostCodecInit = coldHost('codecInit'), hostCodecChunk = coldHost('codecChunk');
    const codecFormats = ['gzip', 'deflate', 'deflate-raw'];
    let nextCodecId = 1;
    function codecStream(self, format, compress) {
      format = StringCtor(format);
      if (!codecFormats.includes(format)) throw new TypeErrorCtor('Unsupported compression format: "' + format + '".');
      const id = nextCodecId++;
      hostCodecInit(id, format, compress);
      const run = (bytes, last, controller) => {
        let out;
        try { out = hostCodecChunk(id, bytes, last); } catch (e) { throw new TypeErrorCtor(typeof e === 'string' ? e : e.message); }
        if (out.length) controller.enqueue(bytesFromLatin1(out));
      };
      return new G.TransformStream({
        transform(chunk, controller) {
          if (!(chunk instanceof ArrayBuffer) && !ArrayBuffer.isView(chunk)) throw new TypeErrorCtor('A chunk must be an ArrayBuffer or a view of one.');
          const b = toBytes(chunk);
          if (b.length) run(latin1FromBytes(b), false, controller);
        },
        flush(controller) { run('', true, controller); },
      });
    }
    class CompressionStream {
      #ts;
      constructor(format) { this.#ts = codecStream(this, format, true); }
      get readable() { return this.#ts.readable; }
      get writable() { return this.#ts.writable; }
    }
    class DecompressionStream {
      #ts;
      constructor(format) { this.#ts = codecStream(this, format, false); }
      get readable() { return this.#ts.readable; }
      get writable() { return this.#ts.writable; }
    }
    // TextDecoderStream / TextEncoderStream (Encoding Standard): a decoder or
    // encoder over a TransformStream.
    class TextDecoderStream {
      #dec; #ts;
      constructor(label = 'utf-8', options = {}) {
        const dec = this.#dec = new TextDecoder(label, options);
        this.#ts = new G.TransformStream({
          transform(chunk, controller) {
            if (!(chunk instanceof ArrayBuffer) && !ArrayBuffer.isView(chunk)) throw new TypeErrorCtor('A chunk must be an ArrayBuffer or a view of one.');
            const text = dec.decode(chunk, { stream: true });
            if (text) controller.enqueue(text);
          },
          flush(controller) { const text = dec.decode(); if (text) controller.enqueue(text); },
        });
      }
      get encoding() { return this.#dec.encoding; }
      get fatal() { return this.#dec.fatal; }
      get ignoreBOM() { return this.#dec.ignoreBOM; }
      get readable() { return this.#ts.readable; }
      get writable() { return this.#ts.writable; }
    }
    class TextEncoderStream {
      #ts;
      constructor() {
        const enc = new TextEncoder();
        let high = ''; // a lead surrogate waiting for its trail in the next chunk
        this.#ts = new G.TransformStream({
          transform(chunk, controller) {
            let text = high + StringCtor(chunk);
            high = '';
            const last = text.charCodeAt(text.length - 1);
            if (last >= 0xd800 && last <= 0xdbff) { high = text.slice(-1); text = text.slice(0, -1); }
            if (text) controller.enqueue(enc.encode(text));
          },
          flush(controller) { if (high) controller.enqueue(enc.encode('\ufffd')); },
        });
      }
      get encoding() { return 'utf-8'; }
      get readable() { return this.#ts.readable; }
      get writable() { return this.#ts.writable; }
    }
    return { TextDecoderStream, TextEncoderStream, CompressionStream, DecompressionStream };
  });
  for (const n of ['TextDecoderStream', 'TextEncoderStream', 'CompressionStream', 'DecompressionStream']) {
    lazyGlobal(n, () => textStreamClasses()[n]);
  }
  hidden(G, 'TextEncoder', TextEncoder);
  hidden(G, 'TextDecoder', TextDecoder);

