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
  let trustedHeaders, headerPairs, headerLines;
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
      // trustedHeaders makes the headers of an invocation's request from
      // its lines (invoke): n names and values from lines[start] on.
      trustedHeaders = (lines, start, n) => {
        const h = new Headers();
        for (let i = start; i < start + 2 * n; i += 2) {
          // Values from the gateway come trimmed; the regular expression
          // (slow in the jitless interpreter) runs only when an end is
          // whitespace.
          let v = StringCtor(lines[i + 1]);
          if (v.length > 0 && (headerWS(v.charCodeAt(0)) || headerWS(v.charCodeAt(v.length - 1)))) v = v.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
          h.#list.push([StringCtor(lines[i]).toLowerCase(), v]);
        }
        return h;
      };
      headerPairs = (h) => {
        const list = h.#list;
        if (list.length === 1) return [[list[0][0], list[0][1]]];
        return h.#sortedPairs();
      };
      // headerLines is h as an invocation's answer has it (wireHead): the
      // count, then each name and value, every line ending in a newline.
      headerLines = (h) => {
        const list = h.#list;
        if (list.length === 1) return '1\n' + list[0][0] + '\n' + list[0][1] + '\n';
        const pairs = h.#sortedPairs();
        let lines = pairs.length + '\n';
        for (let i = 0; i < pairs.length; i++) lines += pairs[i][0] + '\n' + pairs[i][1] + '\n';
        return lines;
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

