  // ------------------------------------------------------------ host calls: kv, fetch, providers
  // Every call goes to the host, which checks it against the run's grants;
  // what is installed here grants nothing by itself.
  let nextCall = 1;
  const pendingCalls = new MapCtor();
  function call(op, args) {
    return new PromiseCtor((resolve, reject) => {
      const id = nextCall++;
      pendingCalls.set(id, { resolve, reject });
      // The host throws its refusals (a bound, too many calls) as strings.
      try { host.call(op, JSONstringify(args), id); } catch (e) { pendingCalls.delete(id); reject(typeof e === 'string' ? new ErrorCtor(e) : e); }
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
  function callNow(op, args) {
    const r = host.now(op, JSONstringify(args));
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
  // db: D1's API on the tenant's SQLite database (docs/sql.md), installed
  // under sqlRead or sqlWrite (setGrants). Every statement is a host call
  // the gateway checks and runs; values cross as JSON, a BLOB as hex.
  const ArrayBufferCtor = ArrayBuffer;
  const arrayBufferIsView = ArrayBuffer.isView;
  const charCodeAt = String.prototype.charCodeAt;
  const hexDigits = '0123456789abcdef';
  function toHex(u8) {
    let s = '';
    for (let i = 0; i < u8.length; i++) s += hexDigits[u8[i] >> 4] + hexDigits[u8[i] & 15];
    return s;
  }
  function hexNibble(c) { return c <= 57 ? c - 48 : c - 87; }
  function fromHex(h) {
    const n = h.length >> 1, buf = new ArrayBufferCtor(n), u = new Uint8ArrayCtor(buf);
    for (let i = 0; i < n; i++) u[i] = hexNibble(charCodeAt.call(h, 2 * i)) << 4 | hexNibble(charCodeAt.call(h, 2 * i + 1));
    return buf;
  }
  function sqlValue(v) {
    if (v === null) return null;
    switch (typeof v) {
      case 'number': case 'string': return v;
      case 'boolean': return v ? 1 : 0;
      case 'object':
        if (v instanceof ArrayBufferCtor) return { blob: toHex(new Uint8ArrayCtor(v)) };
        if (arrayBufferIsView(v)) return { blob: toHex(new Uint8ArrayCtor(v.buffer, v.byteOffset, v.byteLength)) };
    }
    throw new TypeErrorCtor("D1_TYPE_ERROR: Type '" + typeof v + "' not supported for value '" + StringCtor(v) + "'");
  }
  function sqlOut(v) { return v !== null && typeof v === 'object' ? fromHex(v.blob) : v; }
  function sqlRows(r) {
    const rows = r.rows, cols = r.columns, out = [];
    for (let i = 0; i < rows.length; i++) {
      const o = {};
      for (let j = 0; j < cols.length; j++) {
        if (cols[j] === '__proto__') defineProperty(o, '__proto__', { value: sqlOut(rows[i][j]), writable: true, enumerable: true, configurable: true });
        else o[cols[j]] = sqlOut(rows[i][j]);
      }
      out[i] = o;
    }
    return out;
  }
  function d1Result(r) { return { success: true, meta: r.meta, results: sqlRows(r) }; }
  const statementOf = new WeakMap();
  function sqlStatement(sql, params) {
    const st = ObjectCreate(D1PreparedStatement.prototype);
    statementOf.set(st, { sql, params });
    return st;
  }
  function wireOf(st) {
    const w = statementOf.get(st);
    if (w === undefined) throw new TypeErrorCtor('Not a statement made by db.prepare.');
    return w;
  }
  function D1PreparedStatement() { throw new TypeErrorCtor('Illegal constructor: use db.prepare.'); }
  const d1Methods = {
    bind(...values) {
      const w = wireOf(this), params = [];
      for (let i = 0; i < values.length; i++) params[i] = sqlValue(values[i]);
      return sqlStatement(w.sql, params);
    },
    async first(column) {
      const r = await call('sql', { mode: 'first', stmts: [wireOf(this)] });
      const rows = sqlRows(r);
      if (rows.length === 0) return null;
      if (column === undefined) return rows[0];
      if (!ObjectHasOwn(rows[0], column)) throw new ErrorCtor('D1_COLUMN_NOTFOUND: Column not found: ' + StringCtor(column));
      return rows[0][column];
    },
    async all() { return d1Result(await call('sql', { mode: 'all', stmts: [wireOf(this)] })); },
    async run() { return d1Result(await call('sql', { mode: 'run', stmts: [wireOf(this)] })); },
    async raw(options) {
      const r = await call('sql', { mode: 'raw', stmts: [wireOf(this)] });
      const out = [];
      if (options && options.columnNames) out.push(r.columns);
      for (let i = 0; i < r.rows.length; i++) {
        const row = r.rows[i];
        for (let j = 0; j < row.length; j++) row[j] = sqlOut(row[j]);
        out.push(row);
      }
      return out;
    },
  };
  for (const name of objectKeys(d1Methods)) hidden(D1PreparedStatement.prototype, name, d1Methods[name]);
  const db = {};
  hidden(db, 'prepare', function prepare(sql) { return sqlStatement(StringCtor(sql), []); });
  hidden(db, 'batch', async function batch(statements) {
    if (!ArrayIsArray(statements)) throw new TypeErrorCtor('db.batch takes an array of statements.');
    const stmts = [];
    for (let i = 0; i < statements.length; i++) stmts[i] = wireOf(statements[i]);
    const rs = await call('sql', { mode: 'batch', stmts });
    const out = [];
    for (let i = 0; i < rs.length; i++) out[i] = d1Result(rs[i]);
    return out;
  });
  hidden(db, 'exec', async function exec(sql) { return call('sql', { mode: 'exec', stmts: [{ sql: StringCtor(sql) }] }); });
  freeze(db);
  // ai: the registry's models (docs/ai.md), installed under the ai grant.
  // The gateway calls the model with its own key; a streamed answer is a
  // body the host holds, read (or relayed) as a fetch answer's is.
  const ai = {};
  hidden(ai, 'run', async function run(model, inputs) {
    if (inputs === null || typeof inputs !== 'object') throw new TypeErrorCtor('ai.run(model, {messages | prompt, max_tokens?, temperature?, stream?}).');
    const r = await call('ai', { model: StringCtor(model), inputs: { messages: inputs.messages, prompt: inputs.prompt === undefined ? undefined : StringCtor(inputs.prompt),
      max_tokens: inputs.max_tokens, temperature: inputs.temperature, stream: !!inputs.stream } });
    return r.stream ? fetchBodyStream(r.stream) : r;
  });
  freeze(ai);
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
  let bindSQL = false;
  let bindAI = false;
  let bindObjects = false;
  function setGrants(json) {
    const b = JSONparse(json);
    for (const name of providerNames) delete G[name];
    providerNames = [];
    bindKV = !!b.kv;
    bindSQL = !!b.sql;
    // Not granted, db does not exist (docs/sql.md).
    if (bindSQL) defineProperty(G, 'db', { value: db, writable: false, configurable: true, enumerable: false });
    else delete G.db;
    bindAI = !!b.ai;
    if (bindAI) defineProperty(G, 'ai', { value: ai, writable: false, configurable: true, enumerable: false });
    else delete G.ai;
    // Not granted, bucket does not exist (docs/objects.md).
    bindObjects = !!b.objects;
    if (bindObjects) defineProperty(G, 'bucket', { value: bucket, writable: false, configurable: true, enumerable: false });
    else delete G.bucket;
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

