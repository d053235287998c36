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

