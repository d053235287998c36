  // ------------------------------------------------------------ bucket: the R2 API (docs/objects.md)
  // Installed under objectsRead or objectsWrite (setGrants); every call is
  // a host call the gateway checks. An object's body is a stream the
  // gateway holds: read with fetch.read, or, returned unread as a
  // Response's body, sent to the visitor from storage (relayOf). A put of
  // the handler's unread request body, or of an unread fetch answer, hands
  // the gateway its token: the bytes never enter the isolate.
  const DateCtor = Date;
  const dateGetTime = Date.prototype.getTime;
  const dateToISO = Date.prototype.toISOString;
  const dateToUTC = Date.prototype.toUTCString;
  const objectChunk = 128 << 10; // bytes a chunked put sends a call
  const httpFields = [['contentType', 'content-type'], ['contentLanguage', 'content-language'], ['contentDisposition', 'content-disposition'],
    ['contentEncoding', 'content-encoding'], ['cacheControl', 'cache-control'], ['cacheExpiry', 'expires']];
  function objectKey(key, what) {
    if (typeof key !== 'string') throw new TypeErrorCtor(what + ': a key is a string.');
    return key;
  }
  function isHeaders(v) { return v instanceof G.Headers; }
  function isoDate(v, what) {
    const d = v instanceof DateCtor ? v : new DateCtor(v);
    if (dateGetTime.call(d) !== dateGetTime.call(d)) throw new TypeErrorCtor(what + ' is not a date.');
    return dateToISO.call(d);
  }
  function wireHTTP(h) {
    if (h == null) return undefined;
    const out = {};
    if (isHeaders(h)) {
      for (const [f, name] of httpFields) {
        const v = h.get(name);
        if (v === null) continue;
        // An Expires that is no date is left out, as a cache ignores it.
        if (f === 'cacheExpiry') { const d = new DateCtor(v); if (dateGetTime.call(d) === dateGetTime.call(d)) out[f] = dateToUTC.call(d); } else out[f] = v;
      }
      return out;
    }
    if (typeof h !== 'object') throw new TypeErrorCtor('httpMetadata is an object or Headers.');
    for (const k of objectKeys(h)) {
      if (h[k] === undefined) continue;
      if (k === 'cacheExpiry') { isoDate(h[k], 'httpMetadata.cacheExpiry'); out[k] = dateToUTC.call(h[k] instanceof DateCtor ? h[k] : new DateCtor(h[k])); } else out[k] = StringCtor(h[k]);
    }
    return out;
  }
  function wireCustom(c) {
    if (c == null) return undefined;
    if (typeof c !== 'object') throw new TypeErrorCtor('customMetadata is an object of strings.');
    const out = {};
    for (const k of objectKeys(c)) out[k] = StringCtor(c[k]);
    return out;
  }
  function wireOnlyIf(c) {
    if (c == null) return undefined;
    if (isHeaders(c)) {
      // A handler may pass its request's headers (R2 takes them).
      const out = {};
      const m = c.get('if-match'), n = c.get('if-none-match'), since = c.get('if-modified-since'), until = c.get('if-unmodified-since');
      if (m !== null) out.etagMatches = m;
      if (n !== null) out.etagDoesNotMatch = n;
      if (since !== null) out.uploadedAfter = isoDate(since, 'If-Modified-Since');
      if (until !== null) out.uploadedBefore = isoDate(until, 'If-Unmodified-Since');
      return out;
    }
    if (typeof c !== 'object') throw new TypeErrorCtor('onlyIf is an object or Headers.');
    return {
      etagMatches: c.etagMatches === undefined ? undefined : StringCtor(c.etagMatches),
      etagDoesNotMatch: c.etagDoesNotMatch === undefined ? undefined : StringCtor(c.etagDoesNotMatch),
      uploadedBefore: c.uploadedBefore === undefined ? undefined : isoDate(c.uploadedBefore, 'onlyIf.uploadedBefore'),
      uploadedAfter: c.uploadedAfter === undefined ? undefined : isoDate(c.uploadedAfter, 'onlyIf.uploadedAfter'),
    };
  }
  function httpOf(w) {
    const out = {};
    if (w) for (const k of objectKeys(w)) out[k] = k === 'cacheExpiry' ? new DateCtor(w[k]) : w[k];
    return out;
  }
  function R2Object() { throw new TypeErrorCtor('Illegal constructor: objects come from bucket calls.'); }
  function R2ObjectBody() { throw new TypeErrorCtor('Illegal constructor: objects come from bucket calls.'); }
  hidden(R2Object.prototype, 'writeHttpMetadata', function writeHttpMetadata(headers) {
    const h = this.httpMetadata || {};
    for (const [f, name] of httpFields) {
      if (h[f] === undefined) continue;
      headers.set(name, f === 'cacheExpiry' && h[f] instanceof DateCtor ? dateToUTC.call(h[f]) : StringCtor(h[f]));
    }
  });
  Object.setPrototypeOf(R2ObjectBody.prototype, R2Object.prototype);
  function r2Object(w, proto, meta) {
    const o = ObjectCreate(proto || R2Object.prototype);
    o.key = w.key;
    o.version = w.version;
    o.size = w.size;
    o.etag = w.etag;
    o.httpEtag = '"' + w.etag + '"';
    o.uploaded = new DateCtor(w.uploaded);
    o.checksums = { md5: fromHex(w.etag) };
    o.storageClass = 'Standard';
    if (meta !== false) { o.httpMetadata = httpOf(w.http); o.customMetadata = w.custom ? w.custom : {}; }
    return o;
  }
  // An object with its body: the stream is the host's (relayed when a
  // Response is made of it unread) or, for a small object, its bytes.
  const objectBodies = new WeakMap(); // R2ObjectBody -> stream
  const bodyMethods = {
    get body() { return objectBodies.get(this); },
    get bodyUsed() { const s = objectBodies.get(this); return !!(s && (s.locked || s._disturbed)); },
    async arrayBuffer() { return new Response(this.body).arrayBuffer(); },
    async bytes() { return new Response(this.body).bytes(); },
    async text() { return new Response(this.body).text(); },
    async json() { return new Response(this.body).json(); },
    async blob() {
      const b = await new Response(this.body).arrayBuffer();
      return new Blob([b], { type: (this.httpMetadata && this.httpMetadata.contentType) || '' });
    },
  };
  for (const k of objectKeys(bodyMethods)) defineProperty(R2ObjectBody.prototype, k, getOwnPropertyDescriptor(bodyMethods, k));
  function r2ObjectBody(w) {
    const o = r2Object(w, R2ObjectBody.prototype);
    o.range = { offset: w.range[0], length: w.range[1] };
    objectBodies.set(o, w.stream ? fetchBodyStream(w.stream) : bytesStream(bytesFromLatin1(w.data || '')));
    return o;
  }
  function objectCall(op, args) { return call('objects.' + op, args); }
  const bucket = {};
  hidden(bucket, 'head', async function head(key) {
    const w = await objectCall('head', { key: objectKey(key, 'bucket.head') });
    return w === null ? null : r2Object(w);
  });
  hidden(bucket, 'get', async function get(key, options) {
    const a = { key: objectKey(key, 'bucket.get') };
    if (options != null) {
      const r = options.range;
      if (r != null) {
        if (isHeaders(r)) throw new TypeErrorCtor('bucket.get: give the range as {offset, length} or {suffix}.');
        a.range = {};
        if (r.offset !== undefined) a.range.offset = +r.offset;
        if (r.length !== undefined) a.range.length = +r.length;
        if (r.suffix !== undefined) a.range.suffix = +r.suffix;
      }
      a.onlyIf = wireOnlyIf(options.onlyIf);
    }
    const w = await objectCall('get', a);
    if (w === null) return null;
    return w.body ? r2ObjectBody(w) : r2Object(w);
  });
  hidden(bucket, 'list', async function list(options) {
    options = options || {};
    const include = ArrayIsArray(options.include) ? options.include : [];
    const meta = include.includes('httpMetadata') || include.includes('customMetadata');
    const limit = options.limit === undefined ? 1000 : +options.limit;
    if (!(limit >= 1 && limit <= 1000)) throw new RangeError('bucket.list: limit is 1 to 1000.');
    const w = await objectCall('list', { prefix: options.prefix === undefined ? '' : StringCtor(options.prefix),
      delimiter: options.delimiter === undefined ? '' : StringCtor(options.delimiter),
      cursor: options.cursor == null ? '' : StringCtor(options.cursor), limit, meta });
    const objects = [];
    for (let i = 0; i < w.objects.length; i++) {
      const o = r2Object(w.objects[i], null, meta);
      if (meta && !include.includes('httpMetadata')) delete o.httpMetadata;
      if (meta && !include.includes('customMetadata')) delete o.customMetadata;
      objects.push(o);
    }
    const out = { objects, truncated: w.truncated, delimitedPrefixes: w.delimitedPrefixes };
    if (w.truncated) out.cursor = w.cursor;
    return out;
  });
  hidden(bucket, 'delete', async function (keys) {
    if (ArrayIsArray(keys)) {
      const ks = [];
      for (let i = 0; i < keys.length; i++) ks.push(objectKey(keys[i], 'bucket.delete'));
      await objectCall('delete', { keys: ks });
    } else await objectCall('delete', { key: objectKey(keys, 'bucket.delete') });
  });
  hidden(bucket, 'put', async function put(key, value, options) {
    const a = { key: objectKey(key, 'bucket.put') };
    if (options != null) {
      a.http = wireHTTP(options.httpMetadata);
      a.custom = wireCustom(options.customMetadata);
      a.onlyIf = wireOnlyIf(options.onlyIf);
    }
    let w;
    if (value === null || value === undefined) w = await objectCall('put', a);
    else if (typeof value === 'string') {
      if (value.length <= objectChunk) { a.text = value; w = await objectCall('put', a); } else w = await putChunks(a, bytesChunks(utf8Encode(value)));
    } else if (value instanceof ArrayBufferCtor || arrayBufferIsView(value)) {
      const bytes = value instanceof ArrayBufferCtor ? new Uint8ArrayCtor(value) : new Uint8ArrayCtor(value.buffer, value.byteOffset, value.byteLength);
      if (bytes.length <= objectChunk) { a.data = latin1FromBytes(bytes); w = await objectCall('put', a); } else w = await putChunks(a, bytesChunks(bytes));
    } else if (value instanceof Blob) {
      return bucket.put(key, await value.arrayBuffer(), options);
    } else if (isReadableStream(value)) {
      if (value.locked || value._disturbed) throw new TypeErrorCtor('bucket.put: the stream is ' + (value.locked ? 'locked.' : 'disturbed (read from).'));
      const visitor = visitorBodyOf.get(value), fetched = relayOf.get(value);
      if (visitor !== undefined || fetched !== undefined) {
        // The gateway reads it itself; the stream is used up here.
        value.getReader();
        if (visitor !== undefined) { a.body = visitor; w = await objectCall('upload', a); } else { a.fetch = fetched; w = await objectCall('put', a); }
      } else w = await putChunks(a, streamChunks(value.getReader()));
    } else throw new TypeErrorCtor('bucket.put: a value is a string, ArrayBuffer, typed array, Blob, ReadableStream or null.');
    return w === null ? null : r2Object(w);
  });
  freeze(bucket);
  function* bytesChunks(bytes) {
    for (let at = 0; at < bytes.length; at += objectChunk) yield bytes.subarray(at, at + objectChunk);
  }
  async function* streamChunks(reader) {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      if (!(value instanceof Uint8ArrayCtor)) throw new TypeErrorCtor('bucket.put: a stream must yield Uint8Array chunks.');
      for (let at = 0; at < value.length; at += objectChunk) yield value.subarray(at, at + objectChunk);
    }
  }
  // putChunks sends a body a chunk a call; the gateway streams them into
  // the object, which is written only when the last has come.
  async function putChunks(a, chunks) {
    a.upload = true;
    const { upload } = await objectCall('put', a);
    try {
      for await (const c of chunks) {
        const r = await objectCall('write', { stream: upload, data: latin1FromBytes(c) });
        if (r.done) return r.object; // the put ended early (a condition failed)
      }
    } catch (e) {
      // The stream failed: the put is abandoned, the old object stays.
      promiseThen.call(objectCall('write', { stream: upload, abort: true }), undefined, () => {});
      throw e;
    }
    const r = await objectCall('write', { stream: upload, done: true });
    return r.object;
  }
