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
    if (isHandler(v)) { handler = v; return typeof v === 'object' && typeof v.scheduled === 'function' ? 'HS' : 'H'; }
    const json = JSONstringify(v);
    if (json === undefined) return 'U';
    return 'J' + json;
  }

  function setEnv(json) {
    env = JSONparse(json);
    // The granted bindings ride along in env, as on Workers.
    if (bindKV) env.kv = kv;
    if (bindSQL) env.db = db;
    if (bindAI) env.ai = ai;
    if (bindObjects) env.bucket = bucket;
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
  //
  // The handler's result is awaited even when it is a Response already,
  // as workerd does: the microtasks the handler queued run before its
  // answer is read, so a kv write one of them makes is one the answer
  // waits for (the output gate, docs/decisions.md), and the Response is
  // read as they left it.
  async function invoke(wire, bodyArg) {
    return invokeNow(wire, bodyArg);
  }
  async function answerLater(res) { return answerOf(await res); }
  function invokeNow(wire, bodyArg) {
    const f = stringSplit.call(wire, '\n');
    // Only the gateway's socket events start with an empty line
    // (sandbox/websocket.go): a request's first line is its method.
    if (f[0] === '') {
      return stringSlice.call(f[2], 0, 10) === 'scheduled:' ? scheduledEvent(f[2]) : socketEvent(f[2], f[4], bodyArg);
    }
    const method = f[0];
    const request = gatewayRequest(f[1], method, f);
    if (bodyArg !== null && method !== 'GET' && method !== 'HEAD') {
      const b = requestBody(request);
      // UTF-8 crosses as its text (well-formed: no lone surrogate), ASCII
      // and bytes as Latin-1.
      if (f[3] === 't') { b.text = bodyArg; b.wf = true; } else { b.latin1 = bodyArg; b.ascii = f[3] === 'a'; }
    }
    else if (f[2] && method !== 'GET' && method !== 'HEAD') requestBody(request).stream = requestBodyStream(f[2]);
    const ctx = ObjectCreate(executionContext);
    const fetchFn = typeof handler === 'function' ? handler : handler.fetch;
    return answerLater(fetchFn.call(handler, request, env, ctx));
  }
  // answerOf is the answer to a handler's result (invoke): its string, or a
  // promise of it when the body must be read first.
  function answerOf(res) {
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
    if (b && b.stream) return takeAndAnswer(res, b);
    return answerTaken(res, b, hasBody(b) ? takeHeld(b) : { bytes: new Uint8ArrayCtor(0) });
  }
  async function takeAndAnswer(res, b) { return answerTaken(res, b, await take(res)); }
  function answerTaken(res, b, taken) {
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
  const stringSlice = String.prototype.slice;
  const stringIndexOf = String.prototype.indexOf;
  // scheduledEvent calls the handler's scheduled(controller, env, ctx) for
  // a cron tick, its url "scheduled:<ms>:<cron>" (sandbox/scheduled.go).
  // The answer has no body: 204 settled, 500 threw (the thrown text as its
  // body, and the handle's log has it), 404 no scheduled method; a header
  // says noRetry() was called.
  async function scheduledEvent(url) {
    const i = stringIndexOf.call(url, ':', 10);
    let noRetry = false;
    const controller = {
      cron: stringSlice.call(url, i + 1),
      scheduledTime: +stringSlice.call(url, 10, i),
      noRetry() { noRetry = true; },
    };
    const h = handler;
    if (h === null || typeof h !== 'object' || typeof h.scheduled !== 'function') {
      return wireHead(new Response(null, { status: 404 }), '0', 0, '');
    }
    let status = 204;
    let thrown = '';
    try {
      await h.scheduled(controller, env, ObjectCreate(executionContext));
    } catch (e) {
      reportError(e);
      status = 500;
      try { thrown = stringSlice.call(StringCtor(e !== null && typeof e === 'object' && 'message' in e ? e.message : e), 0, 1000); } catch (_) { thrown = 'an exception'; }
    }
    const res = new Response(null, { status });
    if (noRetry) res.headers.set('retainer-no-retry', '1');
    return thrown ? wireHead(res, 't', 0, '') + thrown : wireHead(res, '0', 0, '');
  }
  // wireHead is the answer's letter and head, every line ending in a newline.
  function wireHead(res, body, stream, relay, size) {
    const start = (waiting ? 'W' : 'R') + res.status + '\n' + res.statusText + '\n' + body + '\n' + stream + '\n' + relay + '\n';
    if (size === undefined) return start + responseHeadLines(res);
    const pairs = headerPairs(res.headers);
    // A held body sent as a stream says its size, so the host can refuse
    // one over its bound before the head leaves (streamLatin1).
    pairs.push(['content-length', StringCtor(size)]);
    let head = start + pairs.length + '\n';
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
  // A handler's request body given to bucket.put unread is read by the
  // gateway itself (visitorBodyOf; 25-objects.js).
  const visitorBodyOf = new WeakMap(); // stream -> token
  function requestBodyStream(token) {
    const st = hostBodyStream('body.read', token);
    visitorBodyOf.set(st, token);
    return st;
  }

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

