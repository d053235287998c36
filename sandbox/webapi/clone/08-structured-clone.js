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

