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
  // first touch, so an isolate makes few of these wrappers. Every host
  // function is read from host when called, never kept: an isolate made
  // from the startup snapshot gets its host functions after the runtime
  // was installed (snapshot.cc, install.go).
  const coldIndex = coldNames.split(',');
  function coldHost(name) {
    const i = coldIndex.indexOf(name);
    if (i < 0) throw new TypeError('No host function ' + name + '.');
    return (...args) => host.op(i, ...args);
  }
  const G = globalThis;
  const { freeze, getPrototypeOf, keys: objectKeys } = Object;
  // A descriptor's fields are read as properties, inherited ones too: a
  // program that put `get`, `set` or `value` on Object.prototype would turn
  // every descriptor the runtime passes into another, or an error. The
  // runtime's definers read a descriptor's own fields only, and the bundled
  // modules define properties with them too (ownDefiners, given to each
  // module's factory: 10-lazy-modules.js, sandbox/js/build).
  const defineOwnProperty = Object.defineProperty, defineOwnProperties = Object.defineProperties;
  const ReflectDefineProperty = Reflect.defineProperty, ReflectOwnKeys = Reflect.ownKeys;
  const ObjectHasOwn = Object.hasOwn, getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const descriptorFields = ['value', 'writable', 'get', 'set', 'enumerable', 'configurable'];
  function ownDescriptor(d) {
    if (d === null || (typeof d !== 'object' && typeof d !== 'function')) return d; // V8 says why not
    const out = { __proto__: null };
    for (let i = 0; i < 6; i++) {
      const f = descriptorFields[i];
      if (ObjectHasOwn(d, f)) out[f] = d[f];
    }
    return out;
  }
  function defineProperty(obj, name, d) { return defineOwnProperty(obj, name, ownDescriptor(d)); }
  function reflectDefineProperty(obj, name, d) { return ReflectDefineProperty(obj, name, ownDescriptor(d)); }
  function defineProperties(obj, props) {
    if (props === null || props === undefined) return defineOwnProperties(obj, props);
    const ks = ReflectOwnKeys(props), ds = { __proto__: null };
    for (let i = 0; i < ks.length; i++) {
      const p = getOwnPropertyDescriptor(props, ks[i]);
      if (p !== undefined && p.enumerable) ds[ks[i]] = ownDescriptor(props[ks[i]]);
    }
    return defineOwnProperties(obj, ds);
  }
  const ownDefiners = freeze({ __proto__: null, defineProperty, defineProperties, reflectDefineProperty });
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

  // Nothing of the host and no shared memory (docs/runtime.md). V8 puts
  // SharedArrayBuffer and Atomics.wait back on a context it restores from
  // a snapshot, so an isolate made from one removes them again when it
  // starts (startIsolate).
  function noSharedMemory() {
    delete G.SharedArrayBuffer;
    if (G.Atomics) { delete G.Atomics.wait; delete G.Atomics.waitAsync; }
  }
  noSharedMemory();
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

