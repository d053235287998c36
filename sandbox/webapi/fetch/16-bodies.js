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
  // ~45% of a worker's CPU for a 17.8 KB page (docs/performance-log.md).
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

