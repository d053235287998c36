// Retainer's in-isolate runtime bootstrap.
//
// This script is evaluated once per isolate, before any program. It is a
// function expression: the engine calls it with the host's functions, it
// installs the web globals, and it returns the internal entry points the
// engine calls (runProgram, invoke, fireTimer, ...). Those stay in the
// engine's hands only: nothing here is reachable from a program, and the
// built-ins it relies on are captured before a program can replace them.
(function bootstrap(host) {
  'use strict';
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
  const fromCharCode = String.fromCharCode;
  const hostLog = host.log;
  const hostSetTimer = host.setTimer;
  const hostClearTimer = host.clearTimer;
  const hostRandom = host.random;

  // Nothing of the host and no shared memory (SPEC §2).
  delete G.SharedArrayBuffer;
  if (G.Atomics) { delete G.Atomics.wait; delete G.Atomics.waitAsync; }
  delete G.__host;

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

  // ------------------------------------------------------------ base64
  const b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const b64index = new Uint8ArrayCtor(256).fill(255);
  for (let i = 0; i < 64; i++) b64index[b64chars.charCodeAt(i)] = i;
  function bytesToBase64(b) {
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
    s = s.replace(/[\t\n\f\r ]/g, '');
    if (s.length % 4 === 0) s = s.replace(/==?$/, '');
    if (s.length % 4 === 1 || /[^A-Za-z0-9+/]/.test(s)) return null;
    const out = new Uint8ArrayCtor((s.length * 3) >> 2);
    let o = 0, acc = 0, bits = 0;
    for (let i = 0; i < s.length; i++) {
      acc = (acc << 6) | b64index[s.charCodeAt(i)];
      bits += 6;
      if (bits >= 8) { bits -= 8; out[o++] = (acc >> bits) & 255; }
    }
    return out;
  }
  function domException(message, name) {
    const e = new ErrorCtor(message);
    e.name = name;
    return e;
  }
  hidden(G, 'btoa', function btoa(s) {
    s = StringCtor(s);
    const b = new Uint8ArrayCtor(s.length);
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c > 255) throw domException('The string to be encoded contains characters outside of the Latin1 range.', 'InvalidCharacterError');
      b[i] = c;
    }
    return bytesToBase64(b);
  });
  hidden(G, 'atob', function atob(s) {
    const b = base64ToBytes(StringCtor(s));
    if (b === null) throw domException('The string to be decoded is not correctly encoded.', 'InvalidCharacterError');
    let out = '';
    for (let i = 0; i < b.length; i += 8192) out += fromCharCode.apply(null, b.subarray(i, i + 8192));
    return out;
  });

  // ------------------------------------------------------------ text
  function utf8Encode(s) {
    s = StringCtor(s);
    const out = [];
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) { c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00); i++; }
        else c = 0xfffd;
      } else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return new Uint8ArrayCtor(out);
  }
  function utf8Decode(b, fatal) {
    let out = '';
    const parts = [];
    for (let i = 0; i < b.length;) {
      const c = b[i];
      let cp = 0xfffd, n = 1;
      if (c < 0x80) { cp = c; }
      else if (c >= 0xc2 && c <= 0xdf && i + 1 < b.length && (b[i + 1] & 0xc0) === 0x80) { cp = ((c & 31) << 6) | (b[i + 1] & 63); n = 2; }
      else if (c >= 0xe0 && c <= 0xef && i + 2 < b.length && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80) {
        const v = ((c & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63);
        if (v >= 0x800 && (v < 0xd800 || v > 0xdfff)) { cp = v; n = 3; }
      } else if (c >= 0xf0 && c <= 0xf4 && i + 3 < b.length && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80 && (b[i + 3] & 0xc0) === 0x80) {
        const v = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63);
        if (v >= 0x10000 && v <= 0x10ffff) { cp = v; n = 4; }
      }
      if (cp === 0xfffd && n === 1 && fatal) throw new TypeErrorCtor('The encoded data was not valid for encoding utf-8');
      if (cp >= 0x10000) { cp -= 0x10000; parts.push(0xd800 + (cp >> 10), 0xdc00 + (cp & 1023)); }
      else parts.push(cp);
      i += n;
      if (parts.length >= 8192) { out += fromCharCode.apply(null, parts); parts.length = 0; }
    }
    return out + fromCharCode.apply(null, parts);
  }
  function toBytes(data) {
    if (data instanceof Uint8ArrayCtor) return data;
    if (data instanceof ArrayBuffer) return new Uint8ArrayCtor(data);
    if (ArrayBuffer.isView(data)) return new Uint8ArrayCtor(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeErrorCtor('The data must be an ArrayBuffer or a view of one.');
  }
  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(s = '') { return utf8Encode(s); }
  }
  class TextDecoder {
    #fatal;
    #ignoreBOM;
    constructor(label = 'utf-8', options = {}) {
      label = StringCtor(label).trim().toLowerCase();
      if (label !== 'utf-8' && label !== 'utf8' && label !== 'unicode-1-1-utf-8') throw new RangeError('The encoding "' + label + '" is not supported.');
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return 'utf-8'; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(data) {
      if (data === undefined) return '';
      let b = toBytes(data);
      if (!this.#ignoreBOM && b.length >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf) b = b.subarray(3);
      return utf8Decode(b, this.#fatal);
    }
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
  hidden(cryptoObj, 'randomUUID', function randomUUID() {
    const b = randomBytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = '';
    for (let i = 0; i < 16; i++) h += (b[i] < 16 ? '0' : '') + b[i].toString(16);
    return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
  });
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
    } else if (v instanceof Boolean || v instanceof Number || v instanceof String) out = Object(v.valueOf());
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
  hidden(G, 'structuredClone', function structuredClone(v) { return clone(v, new MapCtor()); });

  // ------------------------------------------------------------ Headers
  const tokenRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function normName(n) {
    n = StringCtor(n);
    if (!tokenRe.test(n)) throw new TypeErrorCtor('Invalid header name: "' + n + '"');
    return n.toLowerCase();
  }
  function normValue(v) {
    v = StringCtor(v).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
    if (/[\0\r\n]/.test(v)) throw new TypeErrorCtor('Invalid header value.');
    return v;
  }
  class Headers {
    #list = []; // [name, value] in insertion order, names lower-case
    constructor(init) {
      if (init == null) return;
      if (init instanceof Headers) { for (const [k, v] of init.#list) this.#list.push([k, v]); return; }
      if (typeof init !== 'object') throw new TypeErrorCtor('Headers init must be an object or a sequence of pairs.');
      if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const p = [...pair];
          if (p.length !== 2) throw new TypeErrorCtor('Each header pair must have exactly two items.');
          this.append(p[0], p[1]);
        }
      } else {
        for (const k of objectKeys(init)) this.append(k, init[k]);
      }
    }
    append(name, value) { this.#list.push([normName(name), normValue(value)]); }
    delete(name) { name = normName(name); this.#list = this.#list.filter(([k]) => k !== name); }
    get(name) {
      name = normName(name);
      const vs = this.#list.filter(([k]) => k === name).map(([, v]) => v);
      return vs.length ? vs.join(', ') : null;
    }
    getSetCookie() { return this.#list.filter(([k]) => k === 'set-cookie').map(([, v]) => v); }
    has(name) { name = normName(name); return this.#list.some(([k]) => k === name); }
    set(name, value) {
      name = normName(name); value = normValue(value);
      const i = this.#list.findIndex(([k]) => k === name);
      if (i < 0) { this.#list.push([name, value]); return; }
      this.#list[i] = [name, value];
      this.#list = this.#list.filter(([k], j) => k !== name || j === i);
    }
    *entries() {
      const names = [...new SetCtor(this.#list.map(([k]) => k))].sort();
      for (const n of names) {
        if (n === 'set-cookie') { for (const v of this.getSetCookie()) yield [n, v]; }
        else yield [n, this.get(n)];
      }
    }
    keys() { return (function* (it) { for (const [k] of it) yield k; })(this.entries()); }
    values() { return (function* (it) { for (const [, v] of it) yield v; })(this.entries()); }
    forEach(cb, thisArg) { for (const [k, v] of this.entries()) cb.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
  }
  hidden(G, 'Headers', Headers);

  // ------------------------------------------------------------ bodies
  function extractBody(body, headers) {
    if (body == null) return null;
    if (typeof body === 'string') {
      if (!headers.has('content-type')) headers.set('content-type', 'text/plain;charset=UTF-8');
      return utf8Encode(body);
    }
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return new Uint8ArrayCtor(toBytes(body));
    return utf8Encode(StringCtor(body));
  }
  const bodyOf = new WeakMap(); // Request/Response -> {bytes, used}
  const BodyMixin = {
    get body() { const b = bodyOf.get(this); return b && b.bytes ? b.bytes : null; },
    get bodyUsed() { const b = bodyOf.get(this); return !!(b && b.used); },
    async arrayBuffer() { const b = consume(this); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); },
    async bytes() { return consume(this); },
    async text() { return utf8Decode(consume(this), false); },
    async json() { return JSONparse(utf8Decode(consume(this), false)); },
  };
  function consume(r) {
    const b = bodyOf.get(r);
    if (b.used) throw new TypeErrorCtor('Body has already been used.');
    b.used = true;
    return b.bytes ? new Uint8ArrayCtor(b.bytes) : new Uint8ArrayCtor(0);
  }
  function mixBody(cls) {
    for (const k of Object.getOwnPropertyNames(BodyMixin)) {
      defineProperty(cls.prototype, k, Object.getOwnPropertyDescriptor(BodyMixin, k));
    }
  }

  // ------------------------------------------------------------ Request
  const methods = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT'];
  class Request {
    #url; #method; #headers; #signal;
    constructor(input, init = {}) {
      let src = null;
      if (input instanceof Request) { src = input; this.#url = input.url; }
      else this.#url = StringCtor(input);
      let method = init.method !== undefined ? StringCtor(init.method) : src ? src.method : 'GET';
      if (methods.includes(method.toUpperCase())) method = method.toUpperCase();
      if (!tokenRe.test(method)) throw new TypeErrorCtor('Invalid method "' + method + '".');
      this.#method = method;
      this.#headers = new Headers(init.headers !== undefined ? init.headers : src ? src.headers : undefined);
      let bytes = null;
      if (init.body !== undefined && init.body !== null) {
        if (method === 'GET' || method === 'HEAD') throw new TypeErrorCtor('Request with GET/HEAD method cannot have body.');
        bytes = extractBody(init.body, this.#headers);
      } else if (src) {
        const sb = bodyOf.get(src);
        if (sb.used) throw new TypeErrorCtor('Body has already been used.');
        bytes = sb.bytes;
      }
      bodyOf.set(this, { bytes, used: false });
      this.#signal = init.signal !== undefined ? init.signal : src ? src.signal : null;
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#headers; }
    get signal() { return this.#signal; }
    get redirect() { return 'follow'; }
    clone() {
      if (this.bodyUsed) throw new TypeErrorCtor('Body has already been used.');
      return new Request(this);
    }
  }
  mixBody(Request);
  hidden(G, 'Request', Request);

  // ------------------------------------------------------------ Response
  class Response {
    #status; #statusText; #headers; #type; #url;
    constructor(body = null, init = {}) {
      const status = init.status !== undefined ? +init.status : 200;
      if (!(status >= 200 && status <= 599) || (status | 0) !== status) throw new RangeError('The status provided (' + init.status + ') is outside the range [200, 599].');
      this.#status = status;
      this.#statusText = init.statusText !== undefined ? StringCtor(init.statusText) : '';
      this.#headers = new Headers(init.headers);
      this.#type = 'default';
      this.#url = '';
      if (body !== null && body !== undefined && (status === 101 || status === 204 || status === 205 || status === 304)) {
        throw new TypeErrorCtor('Response with null body status cannot have body');
      }
      bodyOf.set(this, { bytes: extractBody(body, this.#headers), used: false });
    }
    static json(data, init = {}) {
      const text = JSONstringify(data);
      if (text === undefined) throw new TypeErrorCtor('The data is not JSON-serializable.');
      const headers = new Headers(init.headers);
      if (!headers.has('content-type')) headers.set('content-type', 'application/json');
      return new Response(text, { status: init.status, statusText: init.statusText, headers });
    }
    static redirect(url, status = 302) {
      if (![301, 302, 303, 307, 308].includes(status)) throw new RangeError('Invalid status code ' + status + '.');
      return new Response(null, { status, headers: { location: StringCtor(url) } });
    }
    static error() { const r = new Response(null, { status: 200 }); r.#type = 'error'; r.#status = 0; return r; }
    get status() { return this.#status; }
    get statusText() { return this.#statusText; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get headers() { return this.#headers; }
    get type() { return this.#type; }
    get url() { return this.#url; }
    get redirected() { return false; }
    clone() {
      if (this.bodyUsed) throw new TypeErrorCtor('Body has already been used.');
      const b = bodyOf.get(this);
      return new Response(b.bytes ? new Uint8ArrayCtor(b.bytes) : null, { status: this.#status, statusText: this.#statusText, headers: this.#headers });
    }
  }
  mixBody(Response);
  hidden(G, 'Response', Response);

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

  function setEnv(json) { env = JSONparse(json); }

  // invoke calls the retained handler with a wire request (JSON) and answers
  // a wire response (JSON). The host validates the answer again.
  async function invoke(wireJSON) {
    const w = JSONparse(wireJSON);
    const init = { method: w.method, headers: w.headers };
    if (w.body != null && w.method !== 'GET' && w.method !== 'HEAD') init.body = base64ToBytes(w.body);
    const request = new Request(w.url, init);
    const ctx = {
      waitUntil(p) {
        waiting++;
        promiseThen.call(promiseResolve(p), () => { waiting--; }, (e) => { waiting--; reportError(e); });
      },
      passThroughOnException() { },
    };
    const fetchFn = typeof handler === 'function' ? handler : handler.fetch;
    const res = await fetchFn.call(handler, request, env, ctx);
    if (!(res instanceof Response)) return 'N';
    const b = bodyOf.get(res);
    if (b.used) return 'N';
    const headers = [];
    for (const pair of res.headers) headers.push(pair);
    return (waiting ? 'W' : 'R') + JSONstringify({
      status: res.status,
      statusText: res.statusText,
      headers,
      body: b.bytes && b.bytes.length ? bytesToBase64(b.bytes) : null,
    });
  }
  function pendingWork() { return waiting; }

  return { runProgram, setEnv, invoke, fireTimer, pendingWork, reportError };
})
