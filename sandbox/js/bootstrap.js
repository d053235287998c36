// Retainer's in-isolate runtime bootstrap.
//
// This script is evaluated once per isolate, before any program. It is a
// function expression: the engine calls it with the host's functions, it
// installs the web globals, and it returns the internal entry points the
// engine calls (runProgram, invoke, fireTimer, ...). Those stay in the
// engine's hands only: nothing here is reachable from a program, and the
// built-ins it relies on are captured before a program can replace them.
(function bootstrap(host, coldNames) {
  'use strict';
  // The host's rarely called functions share one native entry: host.op(i,
  // ...args) calls the i-th of coldNames (install.go says why). coldHost
  // answers one of them by name; most are asked for inside what is made on
  // first touch, so an isolate makes few of these wrappers.
  const hostOp = host.op;
  const coldIndex = coldNames.split(',');
  function coldHost(name) {
    const i = coldIndex.indexOf(name);
    if (i < 0) throw new TypeError('No host function ' + name + '.');
    return (...args) => hostOp(i, ...args);
  }
  const G = globalThis;
  const { defineProperty, freeze, getPrototypeOf, keys: objectKeys } = Object;
  const JSONstringify = JSON.stringify;
  const JSONparse = JSON.parse;
  const PromiseCtor = Promise;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseThen = Promise.prototype.then;
  const ArrayIsArray = Array.isArray;
  const StringCtor = String;
  const Uint8ArrayCtor = Uint8Array;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const MapCtor = Map;
  const SetCtor = Set;
  const ObjectCreate = Object.create;
  const fromCharCode = String.fromCharCode;
  const hostLog = host.log;
  const hostSetTimer = host.setTimer;
  const hostClearTimer = host.clearTimer;
  const hostRandom = host.random;

  // Nothing of the host and no shared memory (docs/runtime.md).
  delete G.SharedArrayBuffer;
  if (G.Atomics) { delete G.Atomics.wait; delete G.Atomics.waitAsync; }
  delete G.__host;

  // ES2024 accessors V8 10.9 lacks; no resizable ArrayBuffer exists here,
  // so these are the spec's answers for every buffer (libraries such as
  // webidl-conversions read their getters at load time).
  const abByteLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'byteLength').get;
  if (!Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'resizable')) {
    defineProperty(ArrayBuffer.prototype, 'resizable', { configurable: true, get: function resizable() { abByteLength.call(this); return false; } });
    defineProperty(ArrayBuffer.prototype, 'maxByteLength', { configurable: true, get: function maxByteLength() { return abByteLength.call(this); } });
  }

  // ES2023/ES2024 built-ins that V8 10.9 lacks, following the spec
  // algorithms; model-written code and npm packages use them.
  function method(obj, name, fn) {
    if (!(name in obj)) defineProperty(obj, name, { value: fn, writable: true, configurable: true, enumerable: false });
  }
  // A string with no surrogate at all (nearly every string) is answered by
  // one native scan; the loops below are slow in the jitless interpreter,
  // and webidl-conversions calls toWellFormed on every USVString (each URL
  // and URLSearchParams argument).
  const anySurrogate = /[\ud800-\udfff]/;
  method(String.prototype, 'isWellFormed', function isWellFormed() {
    const s = StringCtor(this);
    if (!anySurrogate.test(s)) return true;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff) { const d = s.charCodeAt(i + 1); if (d >= 0xdc00 && d <= 0xdfff) { i++; continue; } return false; }
      if (c >= 0xdc00 && c <= 0xdfff) return false;
    }
    return true;
  });
  method(String.prototype, 'toWellFormed', function toWellFormed() {
    const s = StringCtor(this);
    if (!anySurrogate.test(s)) return s;
    let out = '';
    let last = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff) { const d = s.charCodeAt(i + 1); if (d >= 0xdc00 && d <= 0xdfff) { i++; continue; } }
      else if (!(c >= 0xdc00 && c <= 0xdfff)) continue;
      out += s.slice(last, i) + '\ufffd';
      last = i + 1;
    }
    return last === 0 ? s : out + s.slice(last);
  });
  const toWellFormedFn = String.prototype.toWellFormed;
  const arrayLikes = [Array.prototype, Object.getPrototypeOf(Uint8Array.prototype)];
  for (const proto of arrayLikes) {
    const isArray = proto === Array.prototype;
    const make = (src, n) => (isArray ? new Array(n) : new src.constructor(n));
    method(proto, 'toReversed', function toReversed() {
      const n = this.length >>> 0; const out = make(this, n);
      for (let i = 0; i < n; i++) out[i] = this[n - 1 - i];
      return out;
    });
    method(proto, 'toSorted', function toSorted(cmp) {
      if (cmp !== undefined && typeof cmp !== 'function') throw new TypeError('The comparison function must be a function.');
      const n = this.length >>> 0; const out = make(this, n);
      for (let i = 0; i < n; i++) out[i] = this[i];
      return out.sort(cmp);
    });
    method(proto, 'with', function (index, value) {
      const n = this.length >>> 0;
      let i = Math.trunc(+index) || 0;
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw new RangeError('Invalid index : ' + index);
      const out = make(this, n);
      for (let k = 0; k < n; k++) out[k] = k === i ? value : this[k];
      return out;
    });
  }
  method(Array.prototype, 'toSpliced', function toSpliced(start, skip, ...items) {
    const copy = Array.prototype.slice.call(this);
    if (arguments.length === 0) return copy;
    if (arguments.length === 1) copy.splice(start); else copy.splice(start, skip, ...items);
    return copy;
  });
  method(Object, 'groupBy', function groupBy(items, cb) {
    const out = Object.create(null); let i = 0;
    for (const v of items) { const k = cb(v, i++); const key = typeof k === 'symbol' ? k : StringCtor(k); (out[key] || (out[key] = [])).push(v); }
    return out;
  });
  method(Map, 'groupBy', function groupBy(items, cb) {
    const out = new Map(); let i = 0;
    for (const v of items) { let k = cb(v, i++); if (k === 0) k = 0; if (!out.has(k)) out.set(k, []); out.get(k).push(v); }
    return out;
  });
  method(Promise, 'withResolvers', function withResolvers() {
    let resolve, reject;
    const promise = new this((a, b) => { resolve = a; reject = b; });
    return { promise, resolve, reject };
  });

  function hidden(obj, name, value) {
    defineProperty(obj, name, { value, writable: true, configurable: true, enumerable: false });
  }

  // ---------------------------------------------------------------- console
  function inspect(v, depth, seen) {
    if (v === null) return 'null';
    switch (typeof v) {
      case 'undefined': return 'undefined';
      case 'string': return depth === 0 ? v : JSONstringify(v);
      case 'number': return Object.is(v, -0) ? '-0' : StringCtor(v);
      case 'bigint': return StringCtor(v) + 'n';
      case 'boolean': return StringCtor(v);
      case 'symbol': return v.toString();
      case 'function': return '[Function: ' + (v.name || '(anonymous)') + ']';
    }
    if (seen.has(v)) return '[Circular]';
    if (v instanceof ErrorCtor) return v.stack || (v.name + ': ' + v.message);
    if (depth > 3) return ArrayIsArray(v) ? '[Array]' : '[Object]';
    seen.add(v);
    try {
      if (ArrayIsArray(v)) {
        const parts = [];
        for (let i = 0; i < v.length && i < 100; i++) parts.push(inspect(v[i], depth + 1, seen));
        if (v.length > 100) parts.push('... ' + (v.length - 100) + ' more items');
        return '[ ' + parts.join(', ') + ' ]';
      }
      if (v instanceof Date) return isNaN(v) ? 'Invalid Date' : v.toISOString();
      if (v instanceof RegExp) return v.toString();
      if (v instanceof MapCtor) {
        const parts = [];
        for (const [k, val] of v) parts.push(inspect(k, depth + 1, seen) + ' => ' + inspect(val, depth + 1, seen));
        return 'Map(' + v.size + ') {' + (parts.length ? ' ' + parts.join(', ') + ' ' : '') + '}';
      }
      if (v instanceof SetCtor) {
        const parts = [];
        for (const val of v) parts.push(inspect(val, depth + 1, seen));
        return 'Set(' + v.size + ') {' + (parts.length ? ' ' + parts.join(', ') + ' ' : '') + '}';
      }
      if (ArrayBuffer.isView(v)) return v.constructor.name + '(' + v.length + ') [ ' + Array.prototype.slice.call(v, 0, 50).join(', ') + ' ]';
      if (v instanceof PromiseCtor) return 'Promise { <pending> }';
      const ks = objectKeys(v);
      const proto = getPrototypeOf(v);
      const name = proto && proto !== Object.prototype && proto.constructor && proto.constructor.name ? proto.constructor.name + ' ' : '';
      if (ks.length === 0) return name + '{}';
      const parts = [];
      for (const k of ks.slice(0, 100)) {
        const key = /^[A-Za-z_$][\w$]*$/.test(k) ? k : JSONstringify(k);
        parts.push(key + ': ' + inspect(v[k], depth + 1, seen));
      }
      return name + '{ ' + parts.join(', ') + ' }';
    } catch (e) {
      return '[object]';
    } finally {
      seen.delete(v);
    }
  }
  function format(args) {
    const parts = [];
    for (let i = 0; i < args.length; i++) parts.push(inspect(args[i], 0, new SetCtor()));
    return parts.join(' ');
  }
  const consoleObj = {};
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    hidden(consoleObj, level, function () { hostLog(level, format(arguments)); });
  }
  hidden(consoleObj, 'trace', function () { hostLog('debug', format(arguments)); });
  hidden(G, 'console', consoleObj);

  // ------------------------------------------------------------ timers
  let nextTimer = 1;
  const timers = new MapCtor();
  function reportError(e) {
    try { hostLog('error', 'Uncaught ' + inspect(e, 0, new SetCtor())); } catch (_) { }
  }
  function addTimer(cb, ms, args, repeat) {
    if (typeof cb !== 'function') throw new TypeErrorCtor('The callback must be a function.');
    const id = nextTimer++;
    ms = +ms;
    if (!(ms >= 1)) ms = repeat ? 1 : 0;
    timers.set(id, { cb, args, ms, repeat });
    hostSetTimer(id, ms);
    return id;
  }
  hidden(G, 'setTimeout', function setTimeout(cb, ms, ...args) { return addTimer(cb, ms, args, false); });
  hidden(G, 'setInterval', function setInterval(cb, ms, ...args) { return addTimer(cb, ms, args, true); });
  function clear(id) {
    id = +id;
    if (timers.delete(id)) hostClearTimer(id);
  }
  hidden(G, 'clearTimeout', function clearTimeout(id) { clear(id); });
  hidden(G, 'clearInterval', function clearInterval(id) { clear(id); });
  function fireTimer(id) {
    const t = timers.get(id);
    if (!t) return;
    if (t.repeat) hostSetTimer(id, t.ms); else timers.delete(id);
    try { t.cb.apply(G, t.args); } catch (e) { reportError(e); }
  }
  hidden(G, 'queueMicrotask', function queueMicrotask(cb) {
    if (typeof cb !== 'function') throw new TypeErrorCtor('The callback must be a function.');
    promiseThen.call(promiseResolve(), () => { try { cb(); } catch (e) { reportError(e); } });
  });

  // ------------------------------------------------------------ performance
  const timeOrigin = Date.now();
  hidden(G, 'performance', freeze({ timeOrigin, now() { return Date.now() - timeOrigin; } }));

  // ------------------------------------------------------------ bytes and text, natively
  // V8's own conversions between strings and bytes (natives.cc): under
  // --jitless a JavaScript loop costs 20 to 80 ns a byte. Each answers
  // undefined for an argument it was not made for (not a string, not a
  // Uint8Array), and the JavaScript below is then the answer, as before.
  // They are one function, convert(op, ...args), numbered as natives.cc's
  // Convert numbers them.
  coldHost('natives')();
  const convert = G.__retainerNatives;
  delete G.__retainerNatives;
  const nativeUtf8Length = (s) => convert(0, s), nativeWriteUtf8 = (s, b) => convert(1, s, b);
  const nativeEncodeInto = (s, b) => convert(2, s, b), nativeWriteLatin1 = (s, b) => convert(3, s, b);
  const nativeLatin1 = (b) => convert(4, b), nativeUtf8 = (b) => convert(5, b);
  const nativeUtf8OfLatin1 = (l) => convert(6, l), nativeLatin1OfUtf8 = (s) => convert(7, s);
  const nativeBase64Of = (x) => convert(8, x), nativeFromBase64 = (s) => convert(9, s);

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
  // by golang.org/x/text behind host.decodeLegacy (sandbox/encoding.go).
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
    // go through Go's compress packages (sandbox/compression.go).
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

  // ------------------------------------------------------------ crypto
  function randomBytes(n) {
    const s = hostRandom(n); // n bytes as a Latin-1 string
    const b = new Uint8ArrayCtor(n);
    for (let i = 0; i < n; i++) b[i] = s.charCodeAt(i);
    return b;
  }
  const cryptoObj = {};
  hidden(cryptoObj, 'getRandomValues', function getRandomValues(view) {
    if (!ArrayBuffer.isView(view) || view instanceof Float32Array || view instanceof Float64Array || view instanceof DataView) {
      throw domException('The data must be an integer typed array.', 'TypeMismatchError');
    }
    if (view.byteLength > 65536) throw domException('The ArrayBufferView\'s byte length exceeds 65536.', 'QuotaExceededError');
    new Uint8ArrayCtor(view.buffer, view.byteOffset, view.byteLength).set(randomBytes(view.byteLength));
    return view;
  });
  // A version 4 UUID, made by the host (hostRandom's -1).
  hidden(cryptoObj, 'randomUUID', function randomUUID() { return hostRandom(-1); });
  hidden(G, 'crypto', cryptoObj);

  // ------------------------------------------------------------ structuredClone
  function clone(v, memo) {
    if (typeof v === 'function' || typeof v === 'symbol') throw domException(StringCtor(typeof v === 'function' ? v.name || 'function' : 'symbol') + ' could not be cloned.', 'DataCloneError');
    if (v === null || typeof v !== 'object') return v;
    if (memo.has(v)) return memo.get(v);
    let out;
    if (v instanceof Date) out = new Date(v.getTime());
    else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
    else if (v instanceof ArrayBuffer) out = v.slice(0);
    else if (ArrayBuffer.isView(v)) {
      const buf = clone(v.buffer, memo);
      out = v instanceof DataView ? new DataView(buf, v.byteOffset, v.byteLength) : new v.constructor(buf, v.byteOffset, v.length);
    } else if (v instanceof MapCtor) {
      out = new MapCtor(); memo.set(v, out);
      for (const [k, val] of v) out.set(clone(k, memo), clone(val, memo));
      return out;
    } else if (v instanceof SetCtor) {
      out = new SetCtor(); memo.set(v, out);
      for (const val of v) out.add(clone(val, memo));
      return out;
    } else if (v instanceof ErrorCtor) {
      out = new ErrorCtor(v.message); out.name = v.name; out.stack = v.stack;
    } else if (v instanceof Boolean || v instanceof Number || v instanceof String || v instanceof BigInt) out = Object(v.valueOf());
    else if (v instanceof File) out = new File([v], v.name, { type: v.type, lastModified: v.lastModified });
    else if (v instanceof Blob) out = new Blob([v], { type: v.type });
    else if (ArrayIsArray(v)) {
      out = new Array(v.length); memo.set(v, out);
      for (const k of objectKeys(v)) out[k] = clone(v[k], memo);
      return out;
    } else if (v instanceof PromiseCtor || v instanceof WeakMap || v instanceof WeakSet) {
      throw domException('#<' + v.constructor.name + '> could not be cloned.', 'DataCloneError');
    } else {
      out = {}; memo.set(v, out);
      for (const k of objectKeys(v)) out[k] = clone(v[k], memo);
      return out;
    }
    memo.set(v, out);
    return out;
  }
  // The transfer option: each listed ArrayBuffer is cloned once and its
  // clone shared by every view of it in the result. V8 10.9 cannot detach a
  // buffer from JavaScript without its staging resizable-buffer flag (which
  // a sandbox for hostile code does not turn on), so the sources stay
  // usable: a program sees the right result, not the detachment.
  hidden(G, 'structuredClone', function structuredClone(v, options = undefined) {
    const memo = new MapCtor();
    if (options !== undefined && options !== null) {
      if (typeof options !== 'object') throw new TypeErrorCtor('structuredClone options must be an object.');
      const transfer = options.transfer;
      if (transfer !== undefined) {
        if (transfer === null || typeof transfer[Symbol.iterator] !== 'function') throw new TypeErrorCtor('transfer must be a sequence.');
        for (const t of [...transfer]) {
          if (!(t instanceof ArrayBuffer)) throw domException('Only ArrayBuffers can be transferred here.', 'DataCloneError');
          if (memo.has(t)) throw domException('An ArrayBuffer is listed twice in transfer.', 'DataCloneError');
          memo.set(t, t.slice(0));
        }
      }
    }
    return clone(v, memo);
  });

  // ------------------------------------------------------------ Headers
  const tokenRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  // Names and values already checked, so that the regular expressions
  // (slow in the jitless interpreter, about half a microsecond each) run
  // once per distinct string rather than on every call: a handler sets the
  // same few headers on every response. Each is bounded: full, it starts
  // over. Objects without a prototype, so that nothing a program changes
  // (Map.prototype, Object.prototype) reaches what they answer.
  const checkedMax = 256;
  let checkedNames = ObjectCreate(null), checkedNameCount = 0; // a name as given -> its lower case
  let checkedValues = ObjectCreate(null), checkedValueCount = 0; // valid, trimmed values -> true
  function normName(n) {
    n = StringCtor(n);
    const known = checkedNames[n];
    if (known !== undefined) return known;
    if (!tokenRe.test(n)) throw new TypeErrorCtor('Invalid header name: "' + n + '"');
    const lower = n.toLowerCase();
    if (checkedNameCount >= checkedMax) { checkedNames = ObjectCreate(null); checkedNameCount = 0; }
    checkedNames[n] = lower;
    checkedNameCount++;
    return lower;
  }
  const reflectOwnKeys = Reflect.ownKeys;
  const propertyIsEnumerable = Object.prototype.propertyIsEnumerable;
  // A header name or value known valid (normName's and normValue's caches)
  // is a ByteString: no regular expression runs for it again.
  function byteStringName(k) { return typeof k === 'string' && checkedNames[k] !== undefined ? k : toByteString(k); }
  function byteStringValue(v) { return typeof v === 'string' && checkedValues[v] === true ? v : toByteString(v); }
  function toByteString(v) {
    if (typeof v === 'symbol') throw new TypeErrorCtor('A Symbol is not a ByteString.');
    v = StringCtor(v);
    if (/[^\x00-\xff]/.test(v)) throw new TypeErrorCtor('The value is not a ByteString.');
    return v;
  }
  function normValue(v) {
    v = StringCtor(v);
    if (checkedValues[v] === true) return v;
    const trimmed = v.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
    // A ByteString (no code unit above 0xFF) without NUL, CR or LF.
    if (/[\0\r\n]|[^\x00-\xff]/.test(trimmed)) throw new TypeErrorCtor('Invalid header value.');
    if (trimmed === v && v.length <= 1024) {
      if (checkedValueCount >= checkedMax) { checkedValues = ObjectCreate(null); checkedValueCount = 0; }
      checkedValues[v] = true;
      checkedValueCount++;
    }
    return trimmed;
  }
  // The pair iterator of WebIDL: a live view (each step reads the sorted,
  // combined list anew), whose prototype says "Headers Iterator".
  const headersIteratorProto = Object.create(Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())));
  const headersIterState = new WeakMap();
  defineProperty(headersIteratorProto, 'next', { value: function next() {
    const st = headersIterState.get(this);
    if (!st) throw new TypeErrorCtor('next called on an object that is not a Headers iterator.');
    const pairs = headerPairs(st.headers);
    if (st.index >= pairs.length) return { value: undefined, done: true };
    const [k, v] = pairs[st.index++];
    return { value: st.kind === 'key' ? k : st.kind === 'value' ? v : [k, v], done: false };
  }, writable: true, configurable: true, enumerable: true });
  defineProperty(headersIteratorProto, Symbol.toStringTag, { value: 'Headers Iterator', configurable: true });
  function headersIterator(headers, kind) {
    const it = Object.create(headersIteratorProto);
    headersIterState.set(it, { headers, kind, index: 0 });
    return it;
  }
  // Fast paths the engine uses on every invocation, with the class's
  // private access (set in its static block): headers from the gateway's
  // wire request, which the gateway has already checked, and a Headers'
  // pairs as iteration yields them, without the generator.
  let trustedHeaders, headerPairs;
  const headerWS = (c) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
  let immutableHeaders, noCorsHeaders, copyHeaders, jsonHeaders;
  // The Fetch Standard's CORS-safelisted request-header, for the
  // "request-no-cors" guard of a Request made with mode "no-cors".
  const corsUnsafeByte = /[\x00-\x08\x0a-\x1f"():<>?@[\\\]{}\x7f]/;
  function corsSafelisted(name, value) {
    if (value.length > 128) return false;
    switch (name) {
      case 'accept': return !corsUnsafeByte.test(value);
      case 'accept-language': case 'content-language': return /^[0-9A-Za-z *,\-.;=]*$/.test(value);
      case 'content-type': {
        if (corsUnsafeByte.test(value)) return false;
        const essence = value.split(';')[0].trim().toLowerCase();
        return essence === 'application/x-www-form-urlencoded' || essence === 'multipart/form-data' || essence === 'text/plain';
      }
      default: return false;
    }
  }
  class Headers {
    #list = []; // [name, value] in insertion order, names lower-case
    // The guard: 'none', 'immutable' (Response.error()) or
    // 'request-no-cors' (a Request with mode "no-cors"). The "request" and
    // "response" guards' forbidden names are not applied: a server runtime
    // sends Cookie and answers Set-Cookie (as workerd, Deno and Node do).
    #guard = 'none';
    #check() { if (this.#guard === 'immutable') throw new TypeErrorCtor('These headers are immutable.'); }
    static {
      immutableHeaders = (h) => { h.#guard = 'immutable'; };
      jsonHeaders = () => { const h = new Headers(); h.#list.push(['content-type', 'application/json']); return h; };
      noCorsHeaders = () => { const h = new Headers(); h.#guard = 'request-no-cors'; return h; };
      copyHeaders = (src) => { const h = new Headers(); h.#guard = src.#guard; const l = src.#list; for (let i = 0; i < l.length; i++) h.#list.push([l[i][0], l[i][1]]); return h; };
      trustedHeaders = (pairs) => {
        const h = new Headers();
        for (let i = 0; i < pairs.length; i++) {
          // Values from the gateway come trimmed; the regular expression
          // (slow in the jitless interpreter) runs only when an end is
          // whitespace.
          let v = StringCtor(pairs[i][1]);
          if (v.length > 0 && (headerWS(v.charCodeAt(0)) || headerWS(v.charCodeAt(v.length - 1)))) v = v.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
          h.#list.push([StringCtor(pairs[i][0]).toLowerCase(), v]);
        }
        return h;
      };
      headerPairs = (h) => {
        const list = h.#list;
        if (list.length === 1) return [[list[0][0], list[0][1]]];
        return h.#sortedPairs();
      };
    }
    constructor(init) {
      if (init === undefined) return;
      // A brand check, not instanceof (which a Proxy would see as a trap).
      if (typeof init === 'object' && init !== null && #list in init && init[Symbol.iterator] === headersIterate) {
        const src = init.#list, list = this.#list;
        for (let i = 0; i < src.length; i++) list.push([src[i][0], src[i][1]]);
        return;
      }
      if (init === null || (typeof init !== 'object' && typeof init !== 'function')) throw new TypeErrorCtor('Headers init must be an object or a sequence of pairs.');
      const iter = init[Symbol.iterator];
      if (iter !== undefined && iter !== null) {
        if (typeof iter !== 'function') throw new TypeErrorCtor('Headers init has a non-callable Symbol.iterator.');
        for (const pair of iter.call(init)) {
          if (pair === null || typeof pair !== 'object' || typeof pair[Symbol.iterator] !== 'function') throw new TypeErrorCtor('Each header pair must be a sequence.');
          const p = [...pair];
          if (p.length !== 2) throw new TypeErrorCtor('Each header pair must have exactly two items.');
          this.append(p[0], p[1]);
        }
      } else {
        // A WebIDL record<ByteString, ByteString>: own keys in order,
        // enumerable ones only, every key and value converted before any
        // pair is appended (and validated).
        // Index loops and no descriptor objects: the record form is what
        // nearly every handler passes ({'content-type': ...}).
        const keys = reflectOwnKeys(init), pairs = [];
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          if (!propertyIsEnumerable.call(init, key)) continue;
          pairs.push(byteStringName(key), byteStringValue(init[key]));
        }
        for (let i = 0; i < pairs.length; i += 2) this.append(pairs[i], pairs[i + 1]);
      }
    }
    append(name, value) {
      name = normName(name); value = normValue(value); this.#check();
      if (this.#guard === 'request-no-cors') {
        const had = this.get(name);
        if (!corsSafelisted(name, had === null ? value : had + ', ' + value)) return;
      }
      this.#list.push([name, value]);
    }
    delete(name) {
      name = normName(name); this.#check();
      if (this.#guard === 'request-no-cors' && !['accept', 'accept-language', 'content-language', 'content-type'].includes(name)) return;
      this.#list = this.#list.filter(([k]) => k !== name);
    }
    get(name) {
      name = normName(name);
      const list = this.#list;
      let out = null;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] === name) out = out === null ? list[i][1] : out + ', ' + list[i][1];
      }
      return out;
    }
    getSetCookie() { return this.#list.filter(([k]) => k === 'set-cookie').map(([, v]) => v); }
    has(name) {
      name = normName(name);
      const list = this.#list;
      for (let i = 0; i < list.length; i++) if (list[i][0] === name) return true;
      return false;
    }
    set(name, value) {
      name = normName(name); value = normValue(value);
      this.#check();
      if (this.#guard === 'request-no-cors' && !corsSafelisted(name, value)) return;
      const list = this.#list;
      let i = 0;
      while (i < list.length && list[i][0] !== name) i++;
      if (i === list.length) { list.push([name, value]); return; }
      list[i] = [name, value];
      let j = i + 1;
      while (j < list.length && list[j][0] !== name) j++;
      if (j < list.length) this.#list = list.filter(([k], at) => k !== name || at === i);
    }
    #sortedPairs() {
      const names = [...new SetCtor(this.#list.map(([k]) => k))].sort();
      const out = [];
      for (const n of names) {
        if (n === 'set-cookie') { for (const v of this.getSetCookie()) out.push([n, v]); }
        else out.push([n, this.get(n)]);
      }
      return out;
    }
    entries() { return headersIterator(this, 'key+value'); }
    keys() { return headersIterator(this, 'key'); }
    values() { return headersIterator(this, 'value'); }
    forEach(cb, thisArg) {
      if (typeof cb !== 'function') throw new TypeErrorCtor('forEach needs a function.');
      const pairs = this.#sortedPairs();
      for (let i = 0; i < pairs.length; i++) cb.call(thisArg, pairs[i][1], pairs[i][0], this);
    }
    [Symbol.iterator]() { return this.entries(); }
  }
  const headersIterate = Headers.prototype[Symbol.iterator];
  hidden(G, 'Headers', Headers);

  // ------------------------------------------------------------ lazy modules
  // npm-bundled parts are compiled on first touch of one of their globals.
  const hostLoad = coldHost('load');
  const modules = {};
  // The URL module's Go parser (js/url-fast.js, sandbox/urlnative.go).
  {
    const i = coldIndex.indexOf('urlParse');
    modules['url-native'] = freeze({ parse: (input, base) => hostOp(i, input, base) });
  }
  // A module's factory gets loadModule, for the modules it loads on first
  // need (url loads tr46 for a host that is not plain ASCII).
  function loadModule(name) {
    if (!modules[name]) modules[name] = hostLoad(name)(loadModule);
    return modules[name];
  }
  // lazyGlobal defines G[name] as made on first touch by make(): an accessor
  // until then, a data property like hidden()'s after (assigning it first
  // replaces it unmade). The runtime modules and the globals a computation
  // seldom touches are made this way, so that an isolate starts without
  // them (docs/performance.md).
  function lazyGlobal(name, make) { lazyProperty(G, name, make); }
  function lazyProperty(obj, name, make) {
    defineProperty(obj, name, {
      configurable: true, enumerable: false,
      get() {
        const value = make();
        try { hidden(obj, name, value); } catch (e) { /* a frozen object keeps the accessor */ }
        return value;
      },
      set(value) { hidden(obj, name, value); },
    });
  }
  // once(make) answers make()'s value, made on the first call.
  function once(make) {
    let made = false, value;
    return () => {
      if (!made) { value = make(); made = true; }
      return value;
    };
  }
  for (const n of ['URL', 'URLSearchParams']) lazyGlobal(n, () => loadModule('url')[n]);
  const streamNames = ['ReadableStream', 'ReadableStreamDefaultReader', 'ReadableStreamBYOBReader',
    'ReadableStreamDefaultController', 'ReadableByteStreamController', 'ReadableStreamBYOBRequest',
    'WritableStream', 'WritableStreamDefaultWriter', 'WritableStreamDefaultController',
    'TransformStream', 'TransformStreamDefaultController', 'ByteLengthQueuingStrategy', 'CountQueuingStrategy'];
  for (const n of streamNames) lazyGlobal(n, () => loadModule('streams')[n]);
  // Instance checks that must not load a module just to answer "no".
  function isURLSearchParams(v) { return !!modules.url && v instanceof modules.url.URLSearchParams; }
  function isReadableStream(v) { return !!modules.streams && v instanceof modules.streams.ReadableStream; }
  // A relative URL resolves against `location.href` when the program
  // defines a `location` (as Deno's --location); otherwise it is a TypeError,
  // as in workerd (docs/decisions.md).
  function baseURL() {
    const loc = G.location;
    if (loc === null || (typeof loc !== 'object' && typeof loc !== 'string')) return undefined;
    const href = typeof loc === 'string' ? loc : loc.href;
    return typeof href === 'string' ? href : undefined;
  }
  function normalizeURL(u, base = baseURL()) {
    try { return base === undefined ? new (loadModule('url').URL)(u).href : new (loadModule('url').URL)(u, base).href; }
    catch (e) { throw new TypeErrorCtor('Invalid URL: ' + StringCtor(u)); }
  }

  // ------------------------------------------------------------ DOMException, Event, EventTarget
  // DOMException is made on first use: its 25 legacy constants, defined on
  // the class and its prototype, cost ~0.2 ms an isolate.
  const domExceptionClass = once(() => {
    const domCodes = { IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
      NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InUseAttributeError: 10, InvalidStateError: 11,
      SyntaxError: 12, InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15, TypeMismatchError: 17,
      SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21, QuotaExceededError: 22, TimeoutError: 23,
      InvalidNodeTypeError: 24, DataCloneError: 25 };
    class DOMException extends ErrorCtor {
      #name; #code;
      constructor(message = '', name = 'Error') {
        super(message);
        this.#name = StringCtor(name);
        this.#code = domCodes[this.#name] || 0;
      }
      get name() { return this.#name; }
      get code() { return this.#code; }
    }
    // The legacy code constants, on the constructor and its prototype.
    for (const [k, v] of [['INDEX_SIZE_ERR', 1], ['DOMSTRING_SIZE_ERR', 2], ['HIERARCHY_REQUEST_ERR', 3], ['WRONG_DOCUMENT_ERR', 4],
      ['INVALID_CHARACTER_ERR', 5], ['NO_DATA_ALLOWED_ERR', 6], ['NO_MODIFICATION_ALLOWED_ERR', 7], ['NOT_FOUND_ERR', 8],
      ['NOT_SUPPORTED_ERR', 9], ['INUSE_ATTRIBUTE_ERR', 10], ['INVALID_STATE_ERR', 11], ['SYNTAX_ERR', 12],
      ['INVALID_MODIFICATION_ERR', 13], ['NAMESPACE_ERR', 14], ['INVALID_ACCESS_ERR', 15], ['VALIDATION_ERR', 16],
      ['TYPE_MISMATCH_ERR', 17], ['SECURITY_ERR', 18], ['NETWORK_ERR', 19], ['ABORT_ERR', 20], ['URL_MISMATCH_ERR', 21],
      ['QUOTA_EXCEEDED_ERR', 22], ['TIMEOUT_ERR', 23], ['INVALID_NODE_TYPE_ERR', 24], ['DATA_CLONE_ERR', 25]]) {
      defineProperty(DOMException, k, { value: v, enumerable: true });
      defineProperty(DOMException.prototype, k, { value: v, enumerable: true });
    }
    return DOMException;
  });
  lazyGlobal('DOMException', domExceptionClass);
  function domException(message, name) {
    const DOMException = domExceptionClass();
    return new DOMException(message, name);
  }

  const eventState = new WeakMap();
  // Event and EventTarget as the DOM Standard has them for targets outside
  // a tree: flags, initEvent, cancelBubble/returnValue, passive and once
  // listeners, capture listeners first, the signal option.
  function eventInit(init) {
    if (init === undefined || init === null) return {};
    if (typeof init !== 'object' && typeof init !== 'function') throw new TypeErrorCtor('The event init must be an object.');
    return init;
  }
  class Event {
    constructor(type, init = undefined) {
      if (arguments.length === 0) throw new TypeErrorCtor('The event type is required.');
      init = eventInit(init);
      eventState.set(this, { type: StringCtor(type), bubbles: !!init.bubbles, cancelable: !!init.cancelable,
        composed: !!init.composed, defaultPrevented: false, target: null, currentTarget: null, stop: false,
        stopImmediate: false, dispatching: false, initialized: true, inPassive: false, phase: 0,
        timeStamp: Date.now() - timeOrigin, trusted: false });
      defineProperty(this, 'isTrusted', isTrustedDesc);
    }
    get type() { return eventState.get(this).type; }
    get bubbles() { return eventState.get(this).bubbles; }
    get cancelable() { return eventState.get(this).cancelable; }
    get composed() { return eventState.get(this).composed; }
    get defaultPrevented() { return eventState.get(this).defaultPrevented; }
    get target() { return eventState.get(this).target; }
    get currentTarget() { return eventState.get(this).currentTarget; }
    get srcElement() { return eventState.get(this).target; }
    get timeStamp() { return eventState.get(this).timeStamp; }
    get eventPhase() { return eventState.get(this).phase; }
    get returnValue() { return !eventState.get(this).defaultPrevented; }
    set returnValue(v) { if (!v) this.preventDefault(); }
    get cancelBubble() { return eventState.get(this).stop; }
    set cancelBubble(v) { if (v) eventState.get(this).stop = true; }
    composedPath() { const t = eventState.get(this).currentTarget; return t ? [t] : []; }
    preventDefault() { const s = eventState.get(this); if (s.cancelable && !s.inPassive) s.defaultPrevented = true; }
    stopPropagation() { eventState.get(this).stop = true; }
    stopImmediatePropagation() { const s = eventState.get(this); s.stop = true; s.stopImmediate = true; }
    initEvent(type, bubbles = false, cancelable = false) {
      if (arguments.length === 0) throw new TypeErrorCtor('initEvent needs a type.');
      const s = eventState.get(this);
      if (s.dispatching) return;
      s.initialized = true; s.stop = false; s.stopImmediate = false; s.defaultPrevented = false; s.trusted = false; s.target = null;
      s.type = StringCtor(type); s.bubbles = !!bubbles; s.cancelable = !!cancelable;
    }
  }
  // isTrusted is an own, unforgeable property of each event (the DOM's
  // [LegacyUnforgeable]): every event's shares one getter.
  const isTrustedGetter = { get isTrusted() { return eventState.get(this).trusted; } };
  const isTrustedDesc = { get: Object.getOwnPropertyDescriptor(isTrustedGetter, 'isTrusted').get, enumerable: true, configurable: false };
  for (const [k, v] of [['NONE', 0], ['CAPTURING_PHASE', 1], ['AT_TARGET', 2], ['BUBBLING_PHASE', 3]]) {
    defineProperty(Event, k, { value: v, enumerable: true }); defineProperty(Event.prototype, k, { value: v, enumerable: true });
  }
  hidden(G, 'Event', Event);
  const customDetail = new WeakMap();
  class CustomEvent extends Event {
    constructor(type, init = undefined) {
      if (arguments.length === 0) throw new TypeErrorCtor('The event type is required.');
      super(type, init);
      init = eventInit(init);
      customDetail.set(this, init.detail === undefined ? null : init.detail);
    }
    get detail() { return customDetail.get(this); }
    initCustomEvent(type, bubbles = false, cancelable = false, detail = null) {
      if (arguments.length === 0) throw new TypeErrorCtor('initCustomEvent needs a type.');
      if (eventState.get(this).dispatching) return;
      this.initEvent(type, bubbles, cancelable);
      customDetail.set(this, detail);
    }
  }
  hidden(G, 'CustomEvent', CustomEvent);
  const listenersOf = new WeakMap();
  function flattenOptions(options) {
    if (typeof options === 'boolean') return { capture: options };
    if (options === undefined || options === null) return {};
    return options;
  }
  function listenersFor(target) {
    let all = listenersOf.get(target);
    if (!all) { all = new MapCtor(); listenersOf.set(target, all); }
    return all;
  }
  class EventTarget {
    constructor() { listenersOf.set(this, new MapCtor()); }
    addEventListener(type, listener, options = {}) {
      options = flattenOptions(options);
      const capture = !!options.capture;
      const once = !!options.once, passive = !!options.passive;
      const signal = options.signal;
      if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeErrorCtor('The signal option must be an AbortSignal.');
      if (listener == null) return;
      if (signal && signal.aborted) return;
      const all = listenersFor(this);
      type = StringCtor(type);
      if (!all.has(type)) all.set(type, []);
      const list = all.get(type);
      if (list.some((l) => l.listener === listener && l.capture === capture)) return;
      list.push({ listener, capture, once, passive, removed: false });
      if (signal) signal.addEventListener('abort', () => this.removeEventListener(type, listener, { capture }));
    }
    removeEventListener(type, listener, options = {}) {
      options = flattenOptions(options);
      const list = listenersFor(this).get(StringCtor(type));
      if (!list) return;
      const i = list.findIndex((l) => l.listener === listener && l.capture === !!options.capture);
      if (i >= 0) { list[i].removed = true; list.splice(i, 1); }
    }
    dispatchEvent(event) {
      if (!(event instanceof Event)) throw new TypeErrorCtor('The argument is not an Event.');
      return dispatchTo(this, event, false);
    }
  }
  // listenerResults, while a socket event is dispatched, gathers the
  // promises its listeners answer, which the event then awaits
  // (docs/websockets.md).
  let listenerResults = null;
  // dispatchTo dispatches an event; trusted for the runtime's own (an abort).
  function dispatchTo(target, event, trusted) {
    {
      const s = eventState.get(event);
      if (s.dispatching || !s.initialized) throw domException('The event is already being dispatched.', 'InvalidStateError');
      s.trusted = trusted;
      s.dispatching = true;
      s.target = target; s.currentTarget = target; s.phase = 2;
      const list = (listenersFor(target).get(s.type) || []).slice();
      // At the target, capture listeners run first (DOM Standard).
      for (const capturePass of [true, false]) {
        for (const l of list) {
          if (s.stopImmediate) break;
          if (l.removed || l.capture !== capturePass) continue;
          if (l.once) EventTarget.prototype.removeEventListener.call(target, s.type, l.listener, { capture: l.capture });
          s.inPassive = l.passive;
          try {
            let r;
            if (typeof l.listener === 'function') r = l.listener.call(target, event);
            else if (l.listener && typeof l.listener.handleEvent === 'function') r = l.listener.handleEvent(event);
            if (listenerResults !== null && r !== null && typeof r === 'object' && typeof r.then === 'function') listenerResults.push(r);
          } catch (e) { reportError(e); }
          s.inPassive = false;
        }
      }
      s.dispatching = false; s.currentTarget = null; s.phase = 0;
      s.stop = false; s.stopImmediate = false;
      return !s.defaultPrevented;
    }
  }
  hidden(G, 'EventTarget', EventTarget);
  // The global object is an EventTarget too (as a worker's global scope):
  // listeners added to it run with it as `this`; the runtime itself
  // dispatches no events there.
  for (const name of ['addEventListener', 'removeEventListener', 'dispatchEvent']) {
    const method = EventTarget.prototype[name];
    hidden(G, name, { [name](...args) { return method.apply(G, args); } }[name]);
  }

  // ------------------------------------------------------------ AbortController, AbortSignal
  const signalState = new WeakMap();
  let makingSignal = false;
  class AbortSignal extends EventTarget {
    constructor() {
      if (!makingSignal) throw new TypeErrorCtor('Illegal constructor');
      super();
      signalState.set(this, { aborted: false, reason: undefined, onabort: null });
    }
    get aborted() { return signalState.get(this).aborted; }
    get reason() { return signalState.get(this).reason; }
    get onabort() { return signalState.get(this).onabort; }
    set onabort(f) {
      // An event handler attribute: one listener, registered when first
      // set, so it runs in order with addEventListener's (HTML Standard).
      const s = signalState.get(this);
      if (!s.handlerAdded) {
        s.handlerAdded = true;
        this.addEventListener('abort', (ev) => { if (s.onabort) return s.onabort.call(this, ev); });
      }
      s.onabort = typeof f === 'function' ? f : null;
    }
    throwIfAborted() { const s = signalState.get(this); if (s.aborted) throw s.reason; }
    static abort(reason) { const s = newSignal(); abortSignal(s, reason); return s; }
    static timeout(ms) {
      const s = newSignal();
      setTimeout(() => abortSignal(s, domException('The operation timed out.', 'TimeoutError')), ms);
      return s;
    }
    static any(signals) {
      const s = newSignal();
      for (const other of signals) {
        if (other.aborted) { abortSignal(s, other.reason); return s; }
      }
      for (const other of signals) other.addEventListener('abort', () => abortSignal(s, other.reason), { once: true });
      return s;
    }
  }
  function newSignal() { makingSignal = true; try { return new AbortSignal(); } finally { makingSignal = false; } }
  function abortSignal(signal, reason) {
    const s = signalState.get(signal);
    if (s.aborted) return;
    s.aborted = true;
    s.reason = reason === undefined ? domException('This operation was aborted', 'AbortError') : reason;
    dispatchTo(signal, new Event('abort'), true);
  }
  class AbortController {
    #signal = newSignal();
    get signal() { return this.#signal; }
    abort(reason) { abortSignal(this.#signal, reason); }
  }
  hidden(G, 'AbortSignal', AbortSignal);
  hidden(G, 'AbortController', AbortController);

  // ------------------------------------------------------------ Blob, File
  const blobBytes = new WeakMap();
  function concatBytes(chunks) {
    let n = 0;
    for (const c of chunks) n += c.length;
    const out = new Uint8ArrayCtor(n);
    let o = 0;
    for (const c of chunks) { out.set(c, o); o += c.length; }
    return out;
  }
  class Blob {
    #type;
    constructor(parts = [], options = {}) {
      const chunks = [];
      if (parts == null || typeof parts[Symbol.iterator] !== 'function') throw new TypeErrorCtor('Blob parts must be a sequence.');
      for (const p of parts) {
        if (p instanceof Blob) chunks.push(blobBytes.get(p));
        else if (p instanceof ArrayBuffer || ArrayBuffer.isView(p)) chunks.push(new Uint8ArrayCtor(toBytes(p)));
        else chunks.push(utf8Encode(StringCtor(p)));
      }
      blobBytes.set(this, concatBytes(chunks));
      const t = options && options.type !== undefined ? StringCtor(options.type) : '';
      this.#type = /^[\x20-\x7e]*$/.test(t) ? t.toLowerCase() : '';
    }
    get size() { return blobBytes.get(this).length; }
    get type() { return this.#type; }
    slice(start = 0, end, contentType = '') {
      const b = blobBytes.get(this);
      const n = b.length;
      const rel = (x) => (x < 0 ? Math.max(n + x, 0) : Math.min(x, n));
      const from = rel(Math.trunc(+start) || 0);
      const to = end === undefined ? n : rel(Math.trunc(+end) || 0);
      const out = new Blob([], { type: contentType });
      blobBytes.set(out, b.slice(from, Math.max(from, to)));
      return out;
    }
    async text() { return decodeUtf8(blobBytes.get(this)); }
    async arrayBuffer() { return blobBytes.get(this).slice().buffer; }
    async bytes() { return blobBytes.get(this).slice(); }
    stream() { return bytesStream(blobBytes.get(this).slice()); }
    get [Symbol.toStringTag]() { return 'Blob'; }
  }
  class File extends Blob {
    #name; #lastModified;
    constructor(parts, name, options = {}) {
      if (arguments.length < 2) throw new TypeErrorCtor('File needs parts and a name.');
      super(parts, options);
      this.#name = StringCtor(name);
      this.#lastModified = options.lastModified !== undefined ? +options.lastModified : Date.now();
    }
    get name() { return this.#name; }
    get lastModified() { return this.#lastModified; }
    get [Symbol.toStringTag]() { return 'File'; }
  }
  hidden(G, 'Blob', Blob);
  hidden(G, 'File', File);

  // ------------------------------------------------------------ FileReader
  // The File API's reader: the read happens in a later task, its events
  // (loadstart, progress, load or error, loadend) as the spec orders them.
  const runtimeBtoa = G.btoa; // as the runtime installed it
  // FileReader and its ProgressEvent are made on first use.
  const fileReaderClasses = once(() => {
    class ProgressEvent extends Event {
      #lengthComputable; #loaded; #total;
      constructor(type, init = {}) {
        super(type, init);
        init = init || {};
        this.#lengthComputable = !!init.lengthComputable; this.#loaded = +init.loaded || 0; this.#total = +init.total || 0;
      }
      get lengthComputable() { return this.#lengthComputable; }
      get loaded() { return this.#loaded; }
      get total() { return this.#total; }
    }
    // eventHandlerAttributes defines `on<type>` attributes: one listener per
    // type, registered when first set, so it runs in order with
    // addEventListener's (HTML Standard).
    function eventHandlerAttributes(cls, types) {
      const handlers = new WeakMap();
      for (const type of types) {
        defineProperty(cls.prototype, 'on' + type, {
          configurable: true, enumerable: true,
          get() { const h = handlers.get(this); return h && h[type] ? h[type].fn : null; },
          set(f) {
            let h = handlers.get(this);
            if (!h) { h = {}; handlers.set(this, h); }
            if (!h[type]) {
              h[type] = { fn: null };
              const slot = h[type];
              this.addEventListener(type, (ev) => { if (slot.fn) return slot.fn.call(this, ev); });
            }
            h[type].fn = typeof f === 'function' || (f !== null && typeof f === 'object') ? f : null;
          },
        });
      }
    }
    class FileReader extends EventTarget {
      #state = 0; #result = null; #error = null; #read = 0;
      get readyState() { return this.#state; }
      get result() { return this.#result; }
      get error() { return this.#error; }
      #start(blob, as) {
        if (!(blob instanceof Blob)) throw new TypeErrorCtor('FileReader reads a Blob.');
        if (this.#state === 1) throw domException('The reader is already reading.', 'InvalidStateError');
        this.#state = 1; this.#result = null; this.#error = null;
        const id = ++this.#read;
        const bytes = blobBytes.get(blob).slice();
        const fire = (type) => dispatchTo(this, new ProgressEvent(type, { lengthComputable: true, loaded: type === 'loadstart' ? 0 : bytes.length, total: bytes.length }), true);
        setTimeout(() => {
          if (id !== this.#read) return; // aborted or restarted
          fire('loadstart');
          setTimeout(() => {
            if (id !== this.#read) return;
            try { this.#result = as(bytes); }
            catch (e) {
              this.#state = 2; this.#error = e; fire('error');
              if (this.#state !== 1) fire('loadend');
              return;
            }
            this.#state = 2;
            fire('progress');
            fire('load');
            if (this.#state !== 1) fire('loadend');
          }, 0);
        }, 0);
      }
      readAsArrayBuffer(blob) { this.#start(blob, (b) => b.buffer); }
      readAsBinaryString(blob) { this.#start(blob, (b) => latin1FromBytes(b)); }
      readAsText(blob, encoding = undefined) {
        this.#start(blob, (b) => {
          let d;
          try { d = new TextDecoder(encoding === undefined ? 'utf-8' : encoding); } catch { d = new TextDecoder('utf-8'); }
          return d.decode(b);
        });
      }
      readAsDataURL(blob) {
        const type = blob instanceof Blob && blob.type ? blob.type : 'application/octet-stream';
        this.#start(blob, (b) => 'data:' + type + ';base64,' + runtimeBtoa(latin1FromBytes(b)));
      }
      abort() {
        if (this.#state === 0 || this.#state === 2) { this.#result = null; return; }
        this.#read++; this.#state = 2; this.#result = null;
        dispatchTo(this, new ProgressEvent('abort'), true);
        if (this.#state !== 1) dispatchTo(this, new ProgressEvent('loadend'), true);
      }
    }
    for (const [k, v] of [['EMPTY', 0], ['LOADING', 1], ['DONE', 2]]) {
      defineProperty(FileReader, k, { value: v, enumerable: true }); defineProperty(FileReader.prototype, k, { value: v, enumerable: true });
    }
    eventHandlerAttributes(FileReader, ['loadstart', 'progress', 'load', 'abort', 'error', 'loadend']);
    return { ProgressEvent, FileReader };
  });
  lazyGlobal('ProgressEvent', () => fileReaderClasses().ProgressEvent);
  lazyGlobal('FileReader', () => fileReaderClasses().FileReader);

  // ------------------------------------------------------------ FormData
  function formValue(value, filename) {
    if (value instanceof Blob) {
      if (!(value instanceof File) || filename !== undefined) {
        return new File([value], filename !== undefined ? StringCtor(filename) : (value instanceof File ? value.name : 'blob'), { type: value.type });
      }
      return value;
    }
    return StringCtor(value);
  }
  class FormData {
    #entries = [];
    constructor(form) { if (form !== undefined) throw new TypeErrorCtor('FormData from a form element is not supported.'); }
    append(name, value, filename) { this.#entries.push([StringCtor(name), formValue(value, filename)]); }
    delete(name) { name = StringCtor(name); this.#entries = this.#entries.filter(([k]) => k !== name); }
    get(name) { name = StringCtor(name); const e = this.#entries.find(([k]) => k === name); return e ? e[1] : null; }
    getAll(name) { name = StringCtor(name); return this.#entries.filter(([k]) => k === name).map(([, v]) => v); }
    has(name) { name = StringCtor(name); return this.#entries.some(([k]) => k === name); }
    set(name, value, filename) {
      name = StringCtor(name);
      const v = formValue(value, filename);
      const i = this.#entries.findIndex(([k]) => k === name);
      if (i < 0) { this.#entries.push([name, v]); return; }
      this.#entries[i] = [name, v];
      this.#entries = this.#entries.filter(([k], j) => k !== name || j === i);
    }
    *entries() { for (const e of this.#entries.slice()) yield [e[0], e[1]]; }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(cb, thisArg) { for (const [k, v] of this.entries()) cb.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
  }
  hidden(G, 'FormData', FormData);

  function multipartEncode(form) {
    const hex = randomBytes(16).reduce((s, b) => s + (b < 16 ? '0' : '') + b.toString(16), '');
    const boundary = '----RetainerFormBoundary' + hex;
    const chunks = [];
    const esc = (n) => n.replace(/\r/g, '%0D').replace(/\n/g, '%0A').replace(/"/g, '%22');
    for (const [name, value] of form) {
      let head = '--' + boundary + '\r\nContent-Disposition: form-data; name="' + esc(name) + '"';
      if (value instanceof File) {
        head += '; filename="' + esc(value.name) + '"\r\nContent-Type: ' + (value.type || 'application/octet-stream') + '\r\n\r\n';
        chunks.push(utf8Encode(head), blobBytes.get(value), utf8Encode('\r\n'));
      } else {
        chunks.push(utf8Encode(head + '\r\n\r\n' + value.replace(/\r?\n|\r/g, '\r\n') + '\r\n'));
      }
    }
    // An empty form is an empty body (as browsers send it), not a lone
    // closing delimiter.
    if (chunks.length) chunks.push(utf8Encode('--' + boundary + '--\r\n'));
    return { bytes: concatBytes(chunks), type: 'multipart/form-data; boundary=' + boundary };
  }
  function indexOfBytes(hay, needle, from) {
    outer: for (let i = from; i <= hay.length - needle.length; i++) {
      for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
      return i;
    }
    return -1;
  }
  function multipartDecode(bytes, contentType) {
    const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
    if (!m) throw new TypeErrorCtor('The multipart body has no boundary.');
    const delim = utf8Encode('--' + (m[1] || m[2]).trim());
    const form = new FormData();
    if (bytes.length === 0) return form;
    let pos = indexOfBytes(bytes, delim, 0);
    if (pos < 0) throw new TypeErrorCtor('The multipart body is malformed.');
    for (;;) {
      pos += delim.length;
      if (bytes[pos] === 45 && bytes[pos + 1] === 45) return form; // "--": the end
      pos += 2; // CRLF
      const headEnd = indexOfBytes(bytes, utf8Encode('\r\n\r\n'), pos);
      if (headEnd < 0) throw new TypeErrorCtor('The multipart body is malformed.');
      const head = decodeUtf8(bytes.subarray(pos, headEnd));
      const next = indexOfBytes(bytes, delim, headEnd + 4);
      if (next < 0) throw new TypeErrorCtor('The multipart body is malformed.');
      const content = bytes.subarray(headEnd + 4, next - 2);
      const disp = /content-disposition:[^\r\n]*?\bname="([^"]*)"/i.exec(head);
      if (!disp) throw new TypeErrorCtor('A multipart part has no name.');
      const file = /filename="([^"]*)"/i.exec(head);
      const type = /content-type:\s*([^\r\n]*)/i.exec(head);
      if (file) form.append(disp[1], new File([content], file[1], { type: type ? type[1].trim() : '' }));
      else form.append(disp[1], decodeUtf8(content));
      pos = next;
    }
  }

  // ------------------------------------------------------------ bodies
  // Streams made from bytes a body already held: a response with one is
  // sent whole, not pumped chunk by chunk.
  const fromBytes = new WeakMap();
  function bytesStream(bytes) {
    const RS = loadModule('streams').ReadableStream;
    const st = new RS({
      type: 'bytes',
      start(c) { if (bytes.length) c.enqueue(bytes); c.close(); },
    });
    fromBytes.set(st, true);
    return st;
  }
  // extractBody returns the body as {bytes}, {latin1}, {text} or {stream},
  // and sets the content type the body implies when the headers have none.
  // A string body stays a string (text): an invocation's answer hands it to
  // Go as it is, which takes it as UTF-8 (sandbox/wire.go), instead of
  // encoding it to Latin-1 here, which in the jitless interpreter cost
  // ~45% of a worker's CPU for a 17.8 KB page (docs/performance.md).
  function extractBody(body, headers) {
    if (body == null) return { bytes: null, latin1: null, text: null, stream: null };
    let bytes = null, latin1 = null, text = null, type = null;
    if (typeof body === 'string') { text = body; type = 'text/plain;charset=UTF-8'; }
    else if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) bytes = new Uint8ArrayCtor(toBytes(body));
    else if (body instanceof Blob) { bytes = blobBytes.get(body).slice(); if (body.type) type = body.type; }
    else if (body instanceof FormData) { const e = multipartEncode(body); bytes = e.bytes; type = e.type; }
    else if (isURLSearchParams(body)) { text = body.toString(); type = 'application/x-www-form-urlencoded;charset=UTF-8'; }
    else if (isReadableStream(body)) {
      if (body.locked || body._disturbed) throw new TypeErrorCtor('The ReadableStream is ' + (body.locked ? 'locked.' : 'disturbed (read from).'));
      return { bytes: null, latin1: null, text: null, stream: body };
    } else { text = StringCtor(body); type = 'text/plain;charset=UTF-8'; }
    if (type && !headers.has('content-type')) headers.set('content-type', type);
    return { bytes, latin1, text, stream: null };
  }
  // A Request's or Response's body state ({bytes, latin1, text, stream,
  // used}, at most one of the first four set):
  // each class's own #body field (read through their static blocks), not a
  // WeakMap: every WeakMap entry is an ephemeron, which V8 writes through a
  // slow barrier and scans again at each young-generation GC, and each
  // invocation made two of them (its Request and its Response).
  let requestBody, responseBody;
  const bodyOf = { get(o) { return requestBody(o) || responseBody(o); } };
  async function readAll(stream) {
    const reader = stream.getReader();
    const chunks = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (!(value instanceof Uint8ArrayCtor)) throw new TypeErrorCtor('A body stream must yield Uint8Array chunks.');
      chunks.push(value);
    }
    return concatBytes(chunks);
  }
  function hasBody(b) { return !!(b && (b.bytes || b.latin1 !== null && b.latin1 !== undefined || b.text !== null && b.text !== undefined || b.stream)); }
  // bodyUsed: the body can no longer be read (used, read from, or locked);
  // bodyDisturbed is what the bodyUsed getter answers (Fetch: disturbed).
  function bodyUsed(b) { return !!(b && (b.used || (b.stream && (b.stream.locked || b.stream._disturbed)))); }
  function bodyDisturbed(b) { return !!(b && (b.used || (b.stream && b.stream._disturbed))); }
  // take marks the body used and answers {bytes} or {latin1}.
  async function take(r) {
    const b = bodyOf.get(r);
    if (bodyUsed(b)) throw new TypeErrorCtor('Body has already been used.');
    if (!hasBody(b)) return { bytes: new Uint8ArrayCtor(0) }; // a null body stays unused
    if (b.stream) {
      b.used = true;
      return { bytes: await readAll(b.stream) };
    }
    return takeHeld(b);
  }
  // takeHeld takes a body the Response holds whole (no stream): at once,
  // so that an invocation's answer needs no turn of the microtask queue
  // for it.
  function takeHeld(b) {
    b.used = true;
    if (b.text !== null && b.text !== undefined) return { text: b.text, wf: !!b.wf };
    if (b.latin1 !== null && b.latin1 !== undefined) return { latin1: b.latin1, ascii: !!b.ascii };
    return { bytes: b.bytes ? new Uint8ArrayCtor(b.bytes) : new Uint8ArrayCtor(0) };
  }
  // asBytes is the bytes of a body taken (take) or held (a body state):
  // text and latin1 are undefined or null when absent.
  function asBytes(t) { return t.bytes || (t.text !== undefined && t.text !== null ? utf8Encode(t.text) : bytesFromLatin1(t.latin1)); }
  // asText is the body UTF-8 decoded: for text, what UTF-8 encoding and
  // decoding would leave (a lone surrogate as U+FFFD, no leading BOM).
  function asText(t) {
    if (t.text !== undefined) {
      const s = t.wf ? t.text : toWellFormedFn.call(t.text);
      return s.charCodeAt(0) === 0xfeff ? s.slice(1) : s;
    }
    // All ASCII (the gateway or a fetch answer said so): the Latin-1
    // string is the text already.
    if (t.ascii) return t.latin1;
    return t.latin1 !== undefined ? textFromLatin1(t.latin1) : textFromLatin1(latin1FromBytes(t.bytes));
  }
  // asLatin1 is the body's bytes as a Latin-1 string (a host call's body).
  function asLatin1(t) { return t.text !== undefined ? utf8Latin1(t.text) : t.latin1 !== undefined ? t.latin1 : latin1FromBytes(t.bytes); }
  async function consume(r) { return asBytes(await take(r)); }
  function contentTypeOf(r) { return r.headers.get('content-type') || ''; }
  const BodyMixin = {
    get body() {
      const b = bodyOf.get(this);
      if (!hasBody(b)) return null;
      if (b.proxy) { b.stream = b.stream.pipeThrough(new G.TransformStream()); b.proxy = false; }
      if (!b.stream) {
        const bytes = b.used ? new Uint8ArrayCtor(0) : asBytes(b);
        b.stream = bytesStream(bytes); b.bytes = null; b.latin1 = null; b.text = null;
      }
      return b.stream;
    },
    get bodyUsed() { return bodyDisturbed(bodyOf.get(this)); },
    async arrayBuffer() { const b = await consume(this); return b.byteLength === b.buffer.byteLength ? b.buffer : b.slice().buffer; },
    async bytes() { return consume(this); },
    async text() { return asText(await take(this)); },
    async json() { return JSONparse(asText(await take(this))); },
    async blob() { const b = await consume(this); return new Blob([b], { type: contentTypeOf(this) }); },
    async formData() {
      const t = contentTypeOf(this);
      const had = hasBody(bodyOf.get(this));
      const taken = await take(this);
      if (/^multipart\/form-data/i.test(t)) {
        // An empty FormData is sent as an empty body; no body at all is not
        // a multipart body.
        if (!had) throw new TypeErrorCtor('There is no multipart body.');
        return multipartDecode(asBytes(taken), t);
      }
      if (/^application\/x-www-form-urlencoded/i.test(t)) {
        const form = new FormData();
        for (const [k, v] of new (loadModule('url').URLSearchParams)(asText(taken))) form.append(k, v);
        return form;
      }
      throw new TypeErrorCtor('The body is not form data (content-type ' + (t || 'none') + ').');
    },
  };
  function mixBody(cls) {
    for (const k of Object.getOwnPropertyNames(BodyMixin)) {
      defineProperty(cls.prototype, k, Object.getOwnPropertyDescriptor(BodyMixin, k));
    }
  }
  function cloneBody(b) {
    if (bodyUsed(b)) throw new TypeErrorCtor('Body has already been used.');
    if (b.stream) {
      const [one, two] = b.stream.tee();
      b.stream = one;
      // The Fetch Standard tees with cloneForBranch2: the clone's chunks are
      // structured clones, so neither side can change the other's buffers.
      const cloned = two.pipeThrough(new G.TransformStream({ transform(chunk, controller) { controller.enqueue(structuredClone(chunk)); } }));
      return { bytes: null, latin1: null, text: null, stream: cloned, used: false };
    }
    return { bytes: b.bytes ? new Uint8ArrayCtor(b.bytes) : null, latin1: b.latin1, text: b.text, stream: null, used: false, ascii: !!b.ascii, wf: !!b.wf };
  }

  // ------------------------------------------------------------ Request
  const forbiddenMethods = ['CONNECT', 'TRACE', 'TRACK'];
  const methods = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH'];
  const gatewayToken = {}; // reachable only here: no program can pass it
  // requestMethod is a Request's method as the Fetch Standard normalizes
  // it (the common ones are already normalized), or a TypeError.
  function requestMethod(method) {
    if (methods.includes(method)) return method;
    if (!tokenRe.test(method)) throw new TypeErrorCtor('Invalid method "' + method + '".');
    if (methods.includes(method.toUpperCase()) && method.toUpperCase() !== 'PATCH') method = method.toUpperCase();
    if (forbiddenMethods.includes(method.toUpperCase())) throw new TypeErrorCtor('Forbidden method "' + method + '".');
    return method;
  }
  // gatewayRequest makes the Request of an invocation (invoke): its url
  // (taken as the gateway gives it) and headers come from the gateway,
  // already checked, and its method is normalized as the constructor
  // would; none of the constructor's option handling runs.
  let gatewayRequest;
  // isRealRequest is the brand check: an object made from Request.prototype
  // by hand passes instanceof but holds none of the private fields, and
  // its url never went through the URL check.
  let isRealRequest, requestParts;
  // RequestInit's enumerations (WebIDL: any other string is a TypeError).
  const requestEnums = {
    mode: ['same-origin', 'no-cors', 'cors', 'navigate'],
    credentials: ['omit', 'same-origin', 'include'],
    cache: ['default', 'no-store', 'reload', 'no-cache', 'force-cache', 'only-if-cached'],
    redirect: ['follow', 'error', 'manual'],
    referrerPolicy: ['', 'no-referrer', 'no-referrer-when-downgrade', 'same-origin', 'origin', 'strict-origin',
      'origin-when-cross-origin', 'strict-origin-when-cross-origin', 'unsafe-url'],
    duplex: ['half'],
    priority: ['high', 'low', 'auto'],
  };
  function requestEnum(init, name, fallback) {
    const v = init[name];
    if (v === undefined) return fallback;
    const str = StringCtor(v);
    if (!requestEnums[name].includes(str)) throw new TypeErrorCtor('Invalid RequestInit ' + name + ': "' + str + '".');
    return str;
  }
  const defaultRequestAttrs = freeze({ mode: 'cors', credentials: 'same-origin', cache: 'default', referrer: 'about:client',
    referrerPolicy: '', integrity: '', keepalive: false, priority: 'auto' });
  class Request {
    #url; #method; #headers; #signal; #redirect;
    // Attributes a server runtime keeps only to answer them (the gateway's
    // fetch has no cache, credentials or referrer of its own).
    // They live together in one object, which no code changes once a
    // constructor has set it (a clone shares it): a Request made for an
    // invocation takes the defaults' object instead of eight fields of its
    // own, each of which V8 defines on every new Request.
    #attrs = defaultRequestAttrs;
    #body;
    static {
      requestBody = (o) => o !== null && typeof o === 'object' && #url in o ? o.#body : undefined;
      isRealRequest = (x) => x !== null && typeof x === 'object' && #url in x;
      // fetch reads the fields themselves: a program may redefine the getters.
      requestParts = (x) => ({ url: x.#url, method: x.#method, headers: x.#headers, redirect: x.#redirect });
      gatewayRequest = (url, method, headers) => {
        const r = new Request(gatewayToken);
        r.#url = url; r.#method = requestMethod(method); r.#headers = headers;
        return r;
      };
    }
    constructor(input, init = {}) {
      if (input === gatewayToken) {
        // gatewayRequest fills the fields in.
        this.#redirect = 'follow';
        this.#body = { bytes: null, latin1: null, text: null, stream: null, used: false };
        return;
      }
      if (init === null || typeof init !== 'object') init = {};
      let src = null;
      const a = { ...defaultRequestAttrs };
      if (isRealRequest(input)) { src = input; this.#url = input.#url; }
      else if (input instanceof Request) throw new TypeErrorCtor('The input is not a Request (an object made from Request.prototype is not one).');
      else this.#url = normalizeURL(StringCtor(input));
      if (src) {
        a.mode = src.#attrs.mode === 'navigate' ? 'same-origin' : src.#attrs.mode;
        a.credentials = src.#attrs.credentials; a.cache = src.#attrs.cache; a.referrer = src.#attrs.referrer;
        a.referrerPolicy = src.#attrs.referrerPolicy; a.integrity = src.#attrs.integrity;
        a.keepalive = src.#attrs.keepalive; a.priority = src.#attrs.priority;
      }
      if (init.referrer !== undefined) {
        const r = StringCtor(init.referrer);
        a.referrer = r === '' ? '' : normalizeURL(r);
      }
      a.referrerPolicy = requestEnum(init, 'referrerPolicy', a.referrerPolicy);
      const mode = requestEnum(init, 'mode', undefined);
      if (mode === 'navigate') throw new TypeErrorCtor('A Request cannot be made with mode "navigate".');
      if (mode !== undefined) a.mode = mode;
      a.credentials = requestEnum(init, 'credentials', a.credentials);
      a.cache = requestEnum(init, 'cache', a.cache);
      if (a.cache === 'only-if-cached' && a.mode !== 'same-origin') throw new TypeErrorCtor('cache "only-if-cached" needs mode "same-origin".');
      this.#redirect = requestEnum(init, 'redirect', src ? src.#redirect : 'follow');
      if (init.integrity !== undefined) a.integrity = StringCtor(init.integrity);
      if (init.keepalive !== undefined) a.keepalive = !!init.keepalive;
      const duplex = requestEnum(init, 'duplex', undefined);
      a.priority = requestEnum(init, 'priority', a.priority);
      const method = requestMethod(init.method !== undefined ? StringCtor(init.method) : src ? src.#method : 'GET');
      if (a.mode === 'no-cors' && !['GET', 'HEAD', 'POST'].includes(method)) throw new TypeErrorCtor('Method "' + method + '" is not allowed with mode "no-cors".');
      this.#method = method;
      this.#attrs = a;
      const headersInit = init.headers !== undefined ? init.headers : src ? src.#headers : undefined;
      if (a.mode === 'no-cors') {
        // The "request-no-cors" guard: only CORS-safelisted headers stay.
        this.#headers = noCorsHeaders();
        if (headersInit !== undefined) for (const [k, v] of new Headers(headersInit)) this.#headers.append(k, v);
      } else {
        this.#headers = new Headers(headersInit);
      }
      let b = { bytes: null, latin1: null, text: null, stream: null, used: false };
      const sb = src ? src.#body : null;
      if (init.body !== undefined && init.body !== null) {
        if (method === 'GET' || method === 'HEAD') throw new TypeErrorCtor('Request with GET/HEAD method cannot have body.');
        b = extractBody(init.body, this.#headers);
        b.used = false;
        if (b.stream && a.keepalive) throw new TypeErrorCtor('A keepalive request cannot have a stream body.');
        // duplex is not required for a stream body, unlike the Fetch
        // Standard: Workers code sends request.body on without it.
        void duplex;
        if (hasBody(sb)) sb.used = true; // the input's body is disturbed all the same
      } else if (hasBody(sb)) {
        if (bodyUsed(sb)) throw new TypeErrorCtor('Body has already been used.');
        if (method === 'GET' || method === 'HEAD') throw new TypeErrorCtor('Request with GET/HEAD method cannot have body.');
        // The body moves to the new request behind a proxy: the input keeps
        // its (now disturbed) stream, the new request has a stream of its
        // own, made when first asked for.
        b = { bytes: sb.bytes, latin1: sb.latin1, text: sb.text, stream: sb.stream, used: false, proxy: !!sb.stream, ascii: !!sb.ascii, wf: !!sb.wf };
        sb.used = true;
      }
      this.#body = b;
      // Made on first read: most handlers never look at it.
      this.#signal = init.signal !== undefined && init.signal !== null ? init.signal : src ? src.signal : undefined;
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#headers; }
    get signal() {
      if (this.#signal === undefined) this.#signal = newSignal();
      return this.#signal;
    }
    get redirect() { return this.#redirect; }
    get cache() { return this.#attrs.cache; }
    get credentials() { return this.#attrs.credentials; }
    get mode() { return this.#attrs.mode; }
    get destination() { return ''; }
    get referrer() {
      if (this.#attrs.referrer === '') return '';
      return this.#attrs.referrer === 'about:client' ? 'about:client' : this.#attrs.referrer;
    }
    get referrerPolicy() { return this.#attrs.referrerPolicy; }
    get integrity() { return this.#attrs.integrity; }
    get keepalive() { return this.#attrs.keepalive; }
    get isReloadNavigation() { return false; }
    get isHistoryNavigation() { return false; }
    get duplex() { return 'half'; }
    clone() {
      const body = cloneBody(this.#body);
      const r = new Request(this.#url, { method: this.#method, signal: this.#signal });
      r.#headers = copyHeaders(this.#headers);
      r.#redirect = this.#redirect; r.#attrs = this.#attrs;
      r.#body = body;
      return r;
    }
  }
  mixBody(Request);
  hidden(G, 'Request', Request);

  // ------------------------------------------------------------ Response
  const nullBodyStatus = [101, 103, 204, 205, 304];
  const responseSocket = new WeakMap(); // response -> the client WebSocket it answers with
  // checkedStatus and checkedStatusText are a ResponseInit's status and
  // statusText, checked (two functions, not one answering a pair: array
  // destructuring runs the iterator protocol, slow in the interpreter).
  function checkedStatus(init) {
    const status = init.status !== undefined ? +init.status : 200;
    if (!(status >= 200 && status <= 599) || (status | 0) !== status) throw new RangeError('The status provided (' + init.status + ') is outside the range [200, 599].');
    return status;
  }
  function checkedStatusText(init) {
    const statusText = init.statusText !== undefined ? StringCtor(init.statusText) : '';
    if (statusText !== '' && /[^\t\x20-\x7e\x80-\xff]/.test(statusText)) throw new TypeErrorCtor('Invalid statusText.');
    return statusText;
  }
  class Response {
    #status; #statusText; #headers; #type; #url; #body;
    static {
      responseBody = (o) => o !== null && typeof o === 'object' && #status in o ? o.#body : undefined;
    }
    constructor(body = null, init = {}) {
      this.#type = 'default';
      this.#url = '';
      if (body === gatewayToken) {
        // Response.json fills the other fields in.
        this.#status = 200; this.#statusText = '';
        return;
      }
      if (init === null || typeof init !== 'object') init = {};
      const ws = init.webSocket;
      let status;
      if (ws !== undefined && ws !== null) {
        // A WebSocket's answer (docs/websockets.md): status 101, no body.
        if (!isClientSocket(ws)) throw new TypeErrorCtor('webSocket must be the client end of a WebSocketPair.');
        if (+init.status !== 101) throw new RangeError('A response with a webSocket must have status 101.');
        if (body !== null && body !== undefined) throw new TypeErrorCtor('A response with a webSocket cannot have a body.');
        status = 101;
        responseSocket.set(this, ws);
      } else status = checkedStatus(init);
      this.#status = status;
      this.#statusText = checkedStatusText(init);
      this.#headers = new Headers(init.headers);
      if (body !== null && body !== undefined && nullBodyStatus.includes(status)) {
        throw new TypeErrorCtor('Response with null body status cannot have body');
      }
      const b = extractBody(body, this.#headers);
      b.used = false;
      this.#body = b;
    }
    static json(data, init = {}) {
      const text = JSONstringify(data);
      if (text === undefined) throw new TypeErrorCtor('The data is not JSON-serializable.');
      if (init && init.status !== undefined && nullBodyStatus.includes(+init.status)) throw new TypeErrorCtor('Response with null body status cannot have body');
      let headers;
      if (!init || init.headers === undefined) headers = jsonHeaders();
      else {
        headers = new Headers(init.headers);
        if (!headers.has('content-type')) headers.set('content-type', 'application/json');
      }
      // The response takes these headers and this body as they are, and
      // only the status is checked as the constructor would: through the
      // constructor the headers were copied once more, and an empty
      // Headers and body made to be replaced (the whole of Response.json's
      // cost over new Response('ok') in an invocation was that copy,
      // ~15 us, BenchmarkInvokeJSON).
      const r = new Response(gatewayToken);
      const status = init ? init.status : undefined, statusText = init ? init.statusText : undefined;
      if (status !== undefined || statusText !== undefined) {
        const given = { status, statusText };
        r.#status = checkedStatus(given);
        r.#statusText = checkedStatusText(given);
      }
      r.#headers = headers;
      r.#body = { bytes: null, latin1: null, text, stream: null, used: false };
      return r;
    }
    static redirect(url, status = 302) {
      if (![301, 302, 303, 307, 308].includes(status)) throw new RangeError('Invalid status code ' + status + '.');
      const r = new Response(null, { status, headers: { location: normalizeURL(StringCtor(url)) } });
      return r;
    }
    static error() { const r = new Response(null, { status: 200 }); r.#type = 'error'; r.#status = 0; immutableHeaders(r.#headers); return r; }
    get status() { return this.#status; }
    get statusText() { return this.#statusText; }
    get webSocket() { return responseSocket.get(this) || null; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get headers() { return this.#headers; }
    get type() { return this.#type; }
    get url() { return this.#url; }
    get redirected() { return false; }
    clone() {
      const r = new Response(null, { status: this.#status === 0 ? 200 : this.#status, statusText: this.#statusText, headers: this.#headers });
      r.#type = this.#type; r.#status = this.#status;
      r.#body = cloneBody(this.#body);
      return r;
    }
  }
  mixBody(Response);
  hidden(G, 'Response', Response);

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
    // travel with each call (sandbox/ecdsa.go).
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
    // that travel with each call (sandbox/rsa.go).
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

  // ------------------------------------------------------------ host calls: kv, fetch, providers
  // Every call goes to the host, which checks it against the run's grants;
  // what is installed here grants nothing by itself.
  const hostCall = host.call;
  let nextCall = 1;
  const pendingCalls = new MapCtor();
  function call(op, args) {
    return new PromiseCtor((resolve, reject) => {
      const id = nextCall++;
      pendingCalls.set(id, { resolve, reject });
      // The host throws its refusals (a bound, too many calls) as strings.
      try { hostCall(op, JSONstringify(args), id); } catch (e) { pendingCalls.delete(id); reject(typeof e === 'string' ? new ErrorCtor(e) : e); }
    });
  }
  function settleHost(id, ok, payload, code) {
    const p = pendingCalls.get(id);
    if (!p) return;
    pendingCalls.delete(id);
    if (ok) { p.resolve(JSONparse(payload)); return; }
    const e = new ErrorCtor(payload);
    if (code) e.code = code; // the contract's error code (spawn: the child's)
    p.reject(e);
  }
  // kv calls the worker can answer at once (its read cache, its write
  // queue) come back synchronously from host.now; the others go out.
  const hostNow = host.now;
  function callNow(op, args) {
    const r = hostNow(op, JSONstringify(args));
    return r === undefined ? call(op, args) : JSONparse(r);
  }
  const kv = {};
  hidden(kv, 'get', async function get(key) { return callNow('kv.get', { key: StringCtor(key) }); });
  // A write the host answered at once (callNow) resolves without another
  // turn of the microtask queue; one sent to the gateway is awaited.
  hidden(kv, 'put', async function put(key, value) {
    if (typeof value !== 'string') throw new TypeErrorCtor('kv values are strings.');
    const r = callNow('kv.put', { key: StringCtor(key), value });
    if (r !== null) await r;
  });
  hidden(kv, 'delete', async function (key) {
    const r = callNow('kv.delete', { key: StringCtor(key) });
    if (r !== null) await r;
  });
  hidden(kv, 'list', async function list(options = {}) {
    options = options || {};
    return call('kv.list', { prefix: options.prefix === undefined ? '' : StringCtor(options.prefix),
      limit: options.limit === undefined ? 1000 : +options.limit, cursor: options.cursor == null ? '' : StringCtor(options.cursor) });
  });
  hidden(G, 'kv', freeze(kv));
  // spawn(body, capabilities): a child run in a fresh isolate (README.md, API);
  // the host checks the capability, the budget and the grants.
  hidden(G, 'spawn', async function spawn(body, capabilities) {
    const caps = [];
    if (capabilities !== undefined && capabilities !== null) for (const c of capabilities) caps.push(StringCtor(c));
    return call('spawn', { body: StringCtor(body), capabilities: caps });
  });
  const badPorts = [0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115,
    117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587,
    601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669,
    6679, 6697, 10080];
  hidden(G, 'fetch', async function fetch(input, init) {
    if (!isRealRequest(input) && input instanceof Request) throw new TypeErrorCtor('fetch: the input is not a Request (an object made from Request.prototype is not one).');
    const req = isRealRequest(input) && init === undefined ? input : new Request(input, init);
    if (req.signal && req.signal.aborted) throw req.signal.reason;
    const taken = hasBody(bodyOf.get(req)) ? await take(req) : null;
    // A string body goes as the string (Go sends its UTF-8); others as
    // Latin-1.
    const text = taken && taken.text !== undefined ? taken.text : undefined;
    const body = taken && text === undefined ? asLatin1(taken) : null;
    const parts = requestParts(req);
    // Port blocking (Fetch Standard): a network error, whatever is granted.
    const portMatch = /^https?:\/\/(?:[^@\/?#]*@)?(?:\[[^\]]*\]|[^:\/?#]*):(\d+)/i.exec(parts.url);
    if (portMatch && badPorts.includes(+portMatch[1])) throw new TypeErrorCtor('fetch: port ' + portMatch[1] + ' is blocked (Fetch Standard port blocking).');
    const r = await call('fetch', { method: parts.method, url: parts.url, headers: [...headerPairs(parts.headers)], body, text, redirect: parts.redirect });
    const res = new Response(null, { status: r.status, statusText: r.statusText, headers: r.headers });
    if (r.stream) responseBody(res).stream = fetchBodyStream(r.stream);
    else {
      const b = responseBody(res);
      if (typeof r.text === 'string') { b.text = r.text; b.wf = true; } else { b.latin1 = r.body; b.ascii = !!r.ascii; }
    }
    return res;
  });
  let providerNames = [];
  let bindKV = false;
  function setGrants(json) {
    const b = JSONparse(json);
    for (const name of providerNames) delete G[name];
    providerNames = [];
    bindKV = !!b.kv;
    for (const [name, tools] of Object.entries(b.providers || {})) {
      const obj = {};
      for (const tool of tools) {
        hidden(obj, tool, async function (args, ...more) {
          // The first argument is what an upstream tool is POSTed; a caller
          // tool (docs/protocol.md) gets every argument.
          const argc = arguments.length;
          const m = [];
          for (const x of more) m.push(x === undefined ? null : x);
          return call('tool', { provider: name, tool, args: args === undefined ? null : args, argc, more: m });
        });
      }
      defineProperty(G, name, { value: freeze(obj), writable: false, configurable: true, enumerable: false });
      providerNames.push(name);
    }
  }

  // ------------------------------------------------------------ stack traces
  // Traces point at the author's own text (docs/runtime.md, "Errors";
  // sandbox/positions.go says how): a program.js frame is told in the
  // author's file and line (a wrapped body's own lines, a bundled module's
  // name and line through the bundle's source map), and the runtime's own
  // frames are left out. The built-ins used are captured here, before any
  // program runs; a trace that cannot be told so falls back to V8's text.
  const errorToString = ErrorCtor.prototype.toString;
  const strCharCodeAt = String.prototype.charCodeAt;
  const strSlice = String.prototype.slice;
  const strLastIndexOf = String.prototype.lastIndexOf;
  let source = { file: '', line: 0, shift: 0, col1: 1, sources: null, mappings: '' };
  let mapLines = null; // the source map's segments by generated line, decoded on the first trace
  function setSource(json) { source = JSONparse(json); mapLines = null; }

  const base64Digit = new Int8Array(128).fill(-1);
  for (let i = 0; i < 64; i++) base64Digit['ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.charCodeAt(i)] = i;
  // decodeMappings reads a version 3 source map's mappings: for each
  // generated line, its segments as [column, source, line, column] runs
  // (0-based), the VLQ fields made absolute.
  function decodeMappings(m) {
    const lines = [];
    let line = [], gcol = 0, src = 0, sline = 0, scol = 0;
    let fields = [], value = 0, shift = 0;
    const endSegment = () => {
      if (fields.length >= 4) {
        gcol += fields[0]; src += fields[1]; sline += fields[2]; scol += fields[3];
        line.push(gcol, src, sline, scol);
      } else if (fields.length >= 1) gcol += fields[0];
      fields = [];
    };
    for (let i = 0; i < m.length; i++) {
      const c = strCharCodeAt.call(m, i);
      if (c === 59 /* ; */) { endSegment(); lines.push(line); line = []; gcol = 0; continue; }
      if (c === 44 /* , */) { endSegment(); continue; }
      const d = c < 128 ? base64Digit[c] : -1;
      if (d < 0) return lines;
      value += (d & 31) * 2 ** shift;
      if (d & 32) { shift += 5; continue; }
      fields.push(value % 2 ? -((value - 1) / 2) : value / 2);
      value = 0; shift = 0;
    }
    endSegment();
    lines.push(line);
    return lines;
  }

  // authorPosition tells a program.js position as "file:line:column" in
  // the author's terms, or null for a line the author did not write.
  function authorPosition(line, col) {
    let file = 'program.js';
    if (source.sources) {
      if (!mapLines) mapLines = decodeMappings(source.mappings);
      const segs = mapLines[line - source.shift - 1];
      if (!segs || segs.length === 0) return null;
      let k = 0;
      for (let i = 0; i < segs.length && segs[i] <= col - 1; i += 4) k = i;
      file = source.sources[segs[k + 1]];
      line = segs[k + 2] + 1;
      col = segs[k + 3] + 1;
    } else if (line === 1 && col > source.col1) {
      col -= source.col1;
    }
    if (file === 'program.js' && source.file) {
      if (line < source.line) return null;
      file = source.file;
      line = line - source.line + 1;
    }
    return file + ':' + line + ':' + col;
  }

  function isRuntimeFile(file) {
    return file === 'runtime.js' || strSlice.call(file, 0, 8) === 'runtime-';
  }

  function prepareStackTrace(error, frames) {
    let out;
    try { out = errorToString.call(error); } catch { out = 'Error'; }
    let v8Text = out;
    try {
      for (let i = 0; i < frames.length; i++) {
        const f = frames[i];
        const file = f.getFileName();
        let text = StringCtor(f);
        v8Text += '\n    at ' + text;
        if (typeof file === 'string' && isRuntimeFile(file)) continue;
        if (file === 'program.js') {
          const line = f.getLineNumber(), col = f.getColumnNumber();
          const where = authorPosition(line, col);
          if (where === null) continue;
          const at = 'program.js:' + line + ':' + col;
          const k = strLastIndexOf.call(text, at);
          if (k >= 0) text = strSlice.call(text, 0, k) + where + strSlice.call(text, k + at.length);
        }
        out += '\n    at ' + text;
      }
    } catch {
      return v8Text;
    }
    return out;
  }
  defineProperty(ErrorCtor, 'prepareStackTrace', { value: prepareStackTrace, writable: true, configurable: true, enumerable: false });

  // ------------------------------------------------------------ the engine's entry points
  let handler;          // the retained request handler, if any
  let env = {};         // the handler's env
  let waiting = 0;      // ctx.waitUntil promises not yet settled

  function isHandler(v) {
    return typeof v === 'function' || (v !== null && typeof v === 'object' && typeof v.fetch === 'function');
  }

  // runProgram calls the program's function and answers, as a string, what
  // the engine needs: "U" (undefined), "H" (a request handler) or "J<json>".
  async function runProgram(fn, moduleForm) {
    const v = await (typeof fn === 'function' && !moduleForm ? fn() : fn);
    if (v === undefined) return 'U';
    if (isHandler(v)) { handler = v; return 'H'; }
    const json = JSONstringify(v);
    if (json === undefined) return 'U';
    return 'J' + json;
  }

  function setEnv(json) {
    env = JSONparse(json);
    // The granted bindings ride along in env, as on Workers.
    if (bindKV) env.kv = kv;
    for (const name of providerNames) env[name] = G[name];
  }

  // An invocation's ctx: its methods on a prototype all share, as on
  // Workers (an ExecutionContext's are its class's), so that an invocation
  // makes one object for it, not two closures besides.
  const executionContext = {
    waitUntil(p) {
      waiting++;
      promiseThen.call(promiseResolve(p), () => { waiting--; }, (e) => { waiting--; reportError(e); });
    },
    passThroughOnException() { },
  };
  // invoke calls the retained handler with a wire request and answers a
  // wire response, both as lines (sandbox/wire.go has the layout and why).
  // The request: method, url, bodyStream, the body's kind (a: all ASCII,
  // t: UTF-8, empty: bytes), the header count, then each header's name and
  // value; its body arrives apart (null for none), as its text for t, else
  // as a Latin-1 string. The answer: a letter, the head's lines (status,
  // statusText, the body's kind, stream, relay, header count, names and
  // values, each line ending in a newline), then the body: the kind is 0
  // for none, 1 for a Latin-1 string (one character a byte), t for text
  // (the handler's own string, which Go takes as UTF-8).
  // The host checks the answer again.
  async function invoke(wire, bodyArg) {
    const f = stringSplit.call(wire, '\n');
    // Only the gateway's socket events start with an empty line
    // (sandbox/websocket.go): a request's first line is its method.
    if (f[0] === '') return socketEvent(f[2], f[4], bodyArg);
    const method = f[0];
    const n = +f[4];
    const pairs = [];
    for (let i = 0; i < n; i++) pairs.push([f[5 + 2 * i], f[6 + 2 * i]]);
    const request = gatewayRequest(f[1], method, trustedHeaders(pairs));
    if (bodyArg !== null && method !== 'GET' && method !== 'HEAD') {
      const b = requestBody(request);
      // UTF-8 crosses as its text (well-formed: no lone surrogate), ASCII
      // and bytes as Latin-1.
      if (f[3] === 't') { b.text = bodyArg; b.wf = true; } else { b.latin1 = bodyArg; b.ascii = f[3] === 'a'; }
    }
    else if (f[2] && method !== 'GET' && method !== 'HEAD') requestBody(request).stream = requestBodyStream(f[2]);
    const ctx = ObjectCreate(executionContext);
    const fetchFn = typeof handler === 'function' ? handler : handler.fetch;
    const res = await fetchFn.call(handler, request, env, ctx);
    if (!(res instanceof Response)) return 'N';
    const ws = responseSocket.get(res);
    if (ws !== undefined) return acceptSocket(res, ws);
    const b = responseBody(res);
    if (bodyUsed(b)) return 'N';
    if (b && b.stream && relayOf.has(b.stream) && !b.stream.locked && !b.stream._disturbed) {
      // An upstream's body returned unread: the gateway relays it.
      b.used = true;
      return wireHead(res, '1', 0, relayOf.get(b.stream));
    }
    if (b && b.stream && !fromBytes.has(b.stream)) {
      // A streamed body (README.md, API): the head is the answer; the pump sends
      // the chunks as the stream yields them.
      const id = nextStream++;
      hostStreamOpen(id);
      b.used = true;
      pumpStream(id, b.stream.getReader());
      return wireHead(res, '1', id, '');
    }
    const taken = b && b.stream ? await take(res) : hasBody(b) ? takeHeld(b) : { bytes: new Uint8ArrayCtor(0) };
    if (taken.text !== undefined) {
      if (taken.text.length * 3 <= bigBody) return wireHead(res, 't', 0, '') + taken.text;
      const l = utf8Latin1(taken.text);
      if (l.length <= bigBody) return wireHead(res, 't', 0, '') + taken.text;
      return streamLatin1(res, l);
    }
    const body = taken.latin1 !== undefined ? taken.latin1 : latin1FromBytes(taken.bytes);
    if (body.length > bigBody) return streamLatin1(res, body);
    return wireHead(res, hasBody(b) ? '1' : '0', 0, '') + body;
  }
  const stringSplit = String.prototype.split;
  // wireHead is the answer's letter and head, every line ending in a newline.
  function wireHead(res, body, stream, relay, size) {
    const pairs = headerPairs(res.headers);
    // A held body sent as a stream says its size, so the host can refuse
    // one over its bound before the head leaves (streamLatin1).
    if (size !== undefined) pairs.push(['content-length', StringCtor(size)]);
    let head = (waiting ? 'W' : 'R') + res.status + '\n' + res.statusText + '\n' + body + '\n' + stream + '\n' + relay + '\n' + pairs.length + '\n';
    for (let i = 0; i < pairs.length; i++) head += pairs[i][0] + '\n' + pairs[i][1] + '\n';
    return head;
  }
  function pendingWork() { return waiting; }

  // A fetch answer the gateway did not read ahead: pulled with fetch.read
  // while the run or invocation lasts, or, returned unread as a Response's
  // body, relayed by the gateway itself (relayOf).
  const relayOf = new WeakMap(); // stream -> token
  function fetchBodyStream(token) {
    const st = hostBodyStream('fetch.read', token);
    relayOf.set(st, token);
    return st;
  }

  // A request body the visitor is still sending: each pull asks the host
  // for what has arrived (a Latin-1 string, at most 64 KiB).
  // A body that stops arriving for the gateway's request_body_idle errors
  // the stream with a TypeError (as a network error does in fetch), which
  // the handler may catch.
  function requestBodyStream(token) { return hostBodyStream('body.read', token); }

  // hostBodyStream is a body the host holds under token: each pull asks it
  // (op) for what has arrived, {data: Latin-1 string, done}; nothing is
  // asked before the program reads (highWaterMark 0).
  function hostBodyStream(op, token) {
    const RS = loadModule('streams').ReadableStream;
    return new RS({
      async pull(c) {
        let r;
        try {
          r = await call(op, { stream: token });
        } catch (e) {
          if (e.code !== 'REQUEST_TIMEOUT') throw e;
          const t = new TypeErrorCtor(e.message);
          t.code = e.code;
          throw t;
        }
        if (r.data) c.enqueue(bytesFromLatin1(r.data));
        if (r.done) c.close();
      },
    }, { highWaterMark: 0 });
  }

  // ------------------------------------------------------------ streamed responses
  // The host's buffer holds a window of bytes; past it streamWrite answers
  // false and the pump waits for streamDrained (a read made room) or
  // cancelStream (the visitor went away, or a bound ended the stream).
  const hostStreamOpen = coldHost('streamOpen');
  const hostStreamWrite = host.streamWrite;
  const hostStreamEnd = coldHost('streamEnd');
  let nextStream = 1;
  const pumping = new MapCtor(); // id -> {reader, resume}
  // pumpStream writes what reader yields to stream id: Uint8Array chunks,
  // or Latin-1 strings when latin1 (a body the runtime already holds).
  async function pumpStream(id, reader, latin1) {
    const state = { reader, resume: null, cancelled: false };
    pumping.set(id, state);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (state.cancelled) return;
        if (done) break;
        if (!latin1 && !(value instanceof Uint8ArrayCtor)) throw new TypeErrorCtor('A body stream must yield Uint8Array chunks.');
        if (!hostStreamWrite(id, latin1 ? value : latin1FromBytes(value))) {
          await new PromiseCtor((resolve) => { state.resume = resolve; });
          if (state.cancelled) return;
        }
      }
      hostStreamEnd(id, '');
    } catch (e) {
      if (!state.cancelled) hostStreamEnd(id, inspect(e, 0, new SetCtor()) || 'error');
    } finally {
      pumping.delete(id);
    }
  }
  // A body over bigBody bytes leaves as a stream, a window at a time, at
  // the reader's pace: the gateway never holds a large answer whole for a
  // visitor who reads slowly, or for each of many (docs/architecture.md,
  // "Budgets"); the isolate holds it, within its own memory bound.
  const bigBody = 1 << 20;
  function streamLatin1(res, latin1) {
    const id = nextStream++;
    hostStreamOpen(id);
    let at = 0;
    const chunks = { read() {
      if (at >= latin1.length) return promiseResolve({ done: true, value: undefined });
      const part = strSlice.call(latin1, at, at + (64 << 10));
      at += part.length;
      return promiseResolve({ done: false, value: part });
    }, cancel() { at = latin1.length; return promiseResolve(); } };
    pumpStream(id, chunks, true);
    return wireHead(res, '1', id, '', res.headers.has('content-length') ? undefined : latin1.length);
  }
  function streamDrained(id) {
    const st = pumping.get(id);
    if (st && st.socket) { flushSocket(st.socket); return; }
    if (st && st.resume) { const r = st.resume; st.resume = null; r(); }
  }
  function cancelStream(id) {
    const st = pumping.get(id);
    if (!st) return;
    if (st.socket) {
      // The gateway let the socket go (its visitor left): it is closed.
      pumping.delete(id);
      st.socket.queue = []; st.socket.queued = 0; st.socket.readyState = 3; st.socket.ended = true;
      socketsByStream.delete(id);
      return;
    }
    st.cancelled = true;
    pumping.delete(id);
    if (st.resume) { const r = st.resume; st.resume = null; r(); }
    try {
      promiseThen.call(promiseResolve(st.reader.cancel(new TypeErrorCtor('The response stream was cancelled: the visitor went away or a bound ended it.'))), undefined, reportError);
    } catch (e) { reportError(e); }
  }


  // ------------------------------------------------------------ WebSocket
  // WebSocketPair and WebSocket as in Workers (docs/websockets.md). The
  // handler's end of an accepted socket writes what it sends as records on
  // a response stream (a kind byte, a 4-byte length, the payload), so the
  // gateway's output gate and the stream's flow control hold for them too;
  // the visitor's messages and close come back as socket events. Sends
  // beyond the stream's window wait here, up to maxSocketQueue bytes: past
  // that the visitor is not reading, and the socket is closed with 1008.
  const maxSocketQueue = 16 << 20;
  const socketState = new WeakMap(); // WebSocket -> its state
  const socketsByStream = new MapCtor(); // stream id -> the handler's WebSocket
  let makingSocket = false;
  function isClientSocket(ws) { const st = socketState.get(ws); return st !== undefined && st.client; }
  function u32(n) { return fromCharCode((n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255); }
  function socketRecord(kind, latin1) { return kind + u32(latin1.length) + latin1; }
  class MessageEvent extends Event {
    #data;
    constructor(type, init = undefined) { super(type, init); init = eventInit(init); this.#data = init.data === undefined ? null : init.data; }
    get data() { return this.#data; }
  }
  hidden(G, 'MessageEvent', MessageEvent);
  class CloseEvent extends Event {
    #code; #reason; #wasClean;
    constructor(type, init = undefined) {
      super(type, init); init = eventInit(init);
      this.#code = init.code === undefined ? 0 : +init.code; this.#reason = init.reason === undefined ? '' : StringCtor(init.reason); this.#wasClean = !!init.wasClean;
    }
    get code() { return this.#code; }
    get reason() { return this.#reason; }
    get wasClean() { return this.#wasClean; }
  }
  hidden(G, 'CloseEvent', CloseEvent);
  class WebSocket extends EventTarget {
    constructor(url) {
      if (!makingSocket) throw new TypeErrorCtor('Outbound WebSockets are not supported here; a handler accepts them with WebSocketPair.');
      super();
      socketState.set(this, { client: false, peer: null, accepted: false, readyState: 0, stream: 0, queue: [], queued: 0, blocked: false, pending: [],
        onmessage: null, onclose: null, onerror: null, onopen: null, url: url === undefined ? null : StringCtor(url) });
    }
    get readyState() { return socketState.get(this).readyState; }
    get url() { return socketState.get(this).url; }
    get protocol() { return ''; }
    get extensions() { return ''; }
    get binaryType() { return 'arraybuffer'; }
    set binaryType(v) { if (v !== 'arraybuffer') throw new TypeErrorCtor('binaryType is always "arraybuffer" here.'); }
    accept() {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('accept() is called on the server end of a WebSocketPair.');
      if (st.accepted) return;
      st.accepted = true;
      st.readyState = 1;
      const pending = st.pending; st.pending = [];
      for (const ev of pending) fireSocket(this, ev);
    }
    send(message) {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('Send on the server end of a WebSocketPair; the client end belongs to the visitor.');
      if (!st.accepted) throw new TypeErrorCtor('You must call accept() on this WebSocket before sending messages.');
      if (st.readyState !== 1) throw new TypeErrorCtor('Can\'t call WebSocket send() after close().');
      let record;
      if (typeof message === 'string') record = socketRecord('t', utf8Latin1(message));
      else if (message instanceof ArrayBuffer || ArrayBuffer.isView(message)) record = socketRecord('b', latin1FromBytes(toBytes(message)));
      else record = socketRecord('t', utf8Latin1(StringCtor(message)));
      writeSocket(this, st, record);
    }
    close(code = undefined, reason = undefined) {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('Close the server end of a WebSocketPair.');
      if (st.readyState >= 2) return;
      if (code !== undefined) {
        code = +code;
        if (!(code === 1000 || (code >= 3000 && code <= 4999)) || (code | 0) !== code) throw domException('The close code must be 1000 or in 3000-4999.', 'InvalidAccessError');
      }
      const why = reason === undefined ? '' : utf8Latin1(StringCtor(reason));
      if (why.length > 123) throw domException('The close reason is longer than 123 bytes.', 'SyntaxError');
      const c = code === undefined ? 1000 : code;
      st.readyState = 2;
      writeSocket(this, st, socketRecord('c', fromCharCode((c >> 8) & 255, c & 255) + why));
      st.closeAfter = true;
      endSocketStream(st);
    }
  }
  for (const [name, v] of [['CONNECTING', 0], ['OPEN', 1], ['CLOSING', 2], ['CLOSED', 3]]) {
    defineProperty(WebSocket, name, { value: v, enumerable: true }); defineProperty(WebSocket.prototype, name, { value: v, enumerable: true });
  }
  for (const name of ['onmessage', 'onclose', 'onerror', 'onopen']) {
    defineProperty(WebSocket.prototype, name, { configurable: true, enumerable: true,
      get() { return socketState.get(this)[name]; },
      set(v) { socketState.get(this)[name] = typeof v === 'function' ? v : null; } });
  }
  hidden(G, 'WebSocket', WebSocket);
  class WebSocketPair {
    constructor() {
      makingSocket = true;
      let client, server;
      try { client = new WebSocket(); server = new WebSocket(); } finally { makingSocket = false; }
      const cs = socketState.get(client), ss = socketState.get(server);
      cs.client = true; cs.peer = server; ss.peer = client;
      this[0] = client; this[1] = server;
    }
  }
  hidden(G, 'WebSocketPair', WebSocketPair);

  // writeSocket sends a record, or queues it behind the stream's window.
  function writeSocket(ws, st, record) {
    if (st.stream === 0 || st.blocked || st.queue.length > 0) {
      st.queue.push(record);
      st.queued += record.length;
      if (st.queued > maxSocketQueue) abandonSocket(ws, st);
      return;
    }
    if (!hostStreamWrite(st.stream, record)) st.blocked = true;
  }
  // flushSocket writes what waits, as the window allows.
  function flushSocket(st) {
    st.blocked = false;
    while (st.queue.length > 0 && !st.blocked) {
      const r = st.queue.shift();
      st.queued -= r.length;
      if (!hostStreamWrite(st.stream, r)) st.blocked = true;
    }
    if (st.queue.length === 0) endSocketStream(st);
  }
  function endSocketStream(st) {
    if (st.closeAfter && st.stream !== 0 && st.queue.length === 0 && !st.ended) {
      st.ended = true;
      socketsByStream.delete(st.stream);
      pumping.delete(st.stream);
      hostStreamEnd(st.stream, '');
    }
  }
  // abandonSocket closes a socket whose visitor stopped reading: what waits
  // is dropped, the close goes at once.
  function abandonSocket(ws, st) {
    st.queue = []; st.queued = 0; st.readyState = 3; st.closeAfter = true;
    if (st.stream !== 0 && !st.ended) {
      hostStreamWrite(st.stream, socketRecord('c', fromCharCode(1008 >> 8, 1008 & 255) + 'the visitor is not reading'));
      endSocketStream(st);
    }
  }
  // acceptSocket answers a handler's 101: the server end's records go out
  // on a new stream.
  function acceptSocket(res, client) {
    const server = socketState.get(client).peer;
    const st = socketState.get(server);
    if (st.stream !== 0) throw new TypeErrorCtor('This WebSocket was already returned in a response.');
    const id = nextStream++;
    hostStreamOpen(id);
    st.stream = id;
    socketsByStream.set(id, server);
    pumping.set(id, { socket: st });
    flushSocket(st);
    return wireHead(res, '1', id, '');
  }
  // socketEvent delivers the visitor's message or close to the handler's
  // end (url "socket:<stream>:<kind>:<code>").
  function socketEvent(url, kind, bodyArg) {
    const [, idText, what, codeText] = stringSplit.call(url, ':');
    const ws = socketsByStream.get(+idText);
    if (ws === undefined) return wireHead(new Response(null, { status: 410 }), '0', 0, '');
    const st = socketState.get(ws);
    const raw = bodyArg === null ? '' : bodyArg;
    const text = () => kind === 't' || kind === 'a' ? raw : textFromLatin1(raw);
    let ev;
    if (what === 'c') {
      st.readyState = 3;
      socketsByStream.delete(+idText);
      st.closeAfter = true;
      st.queue = []; st.queued = 0;
      endSocketStream(st);
      const code = +codeText;
      ev = new CloseEvent('close', { code, reason: text(), wasClean: code !== 1006 });
    } else if (what === 't') {
      ev = new MessageEvent('message', { data: text() });
    } else {
      ev = new MessageEvent('message', { data: (kind === 't' ? bytesFromLatin1(utf8Latin1(raw)) : bytesFromLatin1(raw)).buffer });
    }
    if (!st.accepted) { st.pending.push(ev); return wireHead(new Response(null, { status: 204 }), '0', 0, ''); }
    return settleSocketEvent(fireSocket(ws, ev));
  }
  // An event's invocation lasts until the promises its listeners answered
  // settle, so a one-at-a-time handle takes a socket's messages one at a
  // time, each within the invocation bound.
  async function settleSocketEvent(results) {
    for (const p of results) { try { await p; } catch (e) { reportError(e); } }
    return wireHead(new Response(null, { status: 204 }), '0', 0, '');
  }
  function fireSocket(ws, ev) {
    const saved = listenerResults;
    const results = [];
    listenerResults = results;
    try {
      dispatchTo(ws, ev, true);
      const h = socketState.get(ws)['on' + ev.type];
      if (h) {
        try {
          const r = h.call(ws, ev);
          if (r !== null && typeof r === 'object' && typeof r.then === 'function') results.push(r);
        } catch (e) { reportError(e); }
      }
    } finally { listenerResults = saved; }
    return results;
  }

  return { runProgram, setEnv, invoke, fireTimer, pendingWork, reportError, settleHost, setGrants, setSource, streamDrained, cancelStream };
})
