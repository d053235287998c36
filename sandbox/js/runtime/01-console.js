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
    hidden(consoleObj, level, function () { host.log(level, format(arguments)); });
  }
  hidden(consoleObj, 'trace', function () { host.log('debug', format(arguments)); });
  hidden(G, 'console', consoleObj);

