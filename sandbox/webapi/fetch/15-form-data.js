  // ------------------------------------------------------------ FormData
  function formValue(value, filename) {
    if (value instanceof Blob) {
      if (!(value instanceof File) || filename !== undefined) {
        return new File([value], filename !== undefined ? StringCtor(filename) : (value instanceof File ? value.name : 'blob'), { type: value.type });
      }
      return value;
    }
    return StringCtor(value);
  }
  class FormData {
    #entries = [];
    constructor(form) { if (form !== undefined) throw new TypeErrorCtor('FormData from a form element is not supported.'); }
    append(name, value, filename) { this.#entries.push([StringCtor(name), formValue(value, filename)]); }
    delete(name) { name = StringCtor(name); this.#entries = this.#entries.filter(([k]) => k !== name); }
    get(name) { name = StringCtor(name); const e = this.#entries.find(([k]) => k === name); return e ? e[1] : null; }
    getAll(name) { name = StringCtor(name); return this.#entries.filter(([k]) => k === name).map(([, v]) => v); }
    has(name) { name = StringCtor(name); return this.#entries.some(([k]) => k === name); }
    set(name, value, filename) {
      name = StringCtor(name);
      const v = formValue(value, filename);
      const i = this.#entries.findIndex(([k]) => k === name);
      if (i < 0) { this.#entries.push([name, v]); return; }
      this.#entries[i] = [name, v];
      this.#entries = this.#entries.filter(([k], j) => k !== name || j === i);
    }
    *entries() { for (const e of this.#entries.slice()) yield [e[0], e[1]]; }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(cb, thisArg) { for (const [k, v] of this.entries()) cb.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
  }
  hidden(G, 'FormData', FormData);

  function multipartEncode(form) {
    const hex = randomBytes(16).reduce((s, b) => s + (b < 16 ? '0' : '') + b.toString(16), '');
    const boundary = '----RetainerFormBoundary' + hex;
    const chunks = [];
    const esc = (n) => n.replace(/\r/g, '%0D').replace(/\n/g, '%0A').replace(/"/g, '%22');
    for (const [name, value] of form) {
      let head = '--' + boundary + '\r\nContent-Disposition: form-data; name="' + esc(name) + '"';
      if (value instanceof File) {
        head += '; filename="' + esc(value.name) + '"\r\nContent-Type: ' + (value.type || 'application/octet-stream') + '\r\n\r\n';
        chunks.push(utf8Encode(head), blobBytes.get(value), utf8Encode('\r\n'));
      } else {
        chunks.push(utf8Encode(head + '\r\n\r\n' + value.replace(/\r?\n|\r/g, '\r\n') + '\r\n'));
      }
    }
    // An empty form is an empty body (as browsers send it), not a lone
    // closing delimiter.
    if (chunks.length) chunks.push(utf8Encode('--' + boundary + '--\r\n'));
    return { bytes: concatBytes(chunks), type: 'multipart/form-data; boundary=' + boundary };
  }
  function indexOfBytes(hay, needle, from) {
    outer: for (let i = from; i <= hay.length - needle.length; i++) {
      for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
      return i;
    }
    return -1;
  }
  function multipartDecode(bytes, contentType) {
    const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
    if (!m) throw new TypeErrorCtor('The multipart body has no boundary.');
    const delim = utf8Encode('--' + (m[1] || m[2]).trim());
    const form = new FormData();
    if (bytes.length === 0) return form;
    let pos = indexOfBytes(bytes, delim, 0);
    if (pos < 0) throw new TypeErrorCtor('The multipart body is malformed.');
    for (;;) {
      pos += delim.length;
      if (bytes[pos] === 45 && bytes[pos + 1] === 45) return form; // "--": the end
      pos += 2; // CRLF
      const headEnd = indexOfBytes(bytes, utf8Encode('\r\n\r\n'), pos);
      if (headEnd < 0) throw new TypeErrorCtor('The multipart body is malformed.');
      const head = decodeUtf8(bytes.subarray(pos, headEnd));
      const next = indexOfBytes(bytes, delim, headEnd + 4);
      if (next < 0) throw new TypeErrorCtor('The multipart body is malformed.');
      const content = bytes.subarray(headEnd + 4, next - 2);
      const disp = /content-disposition:[^\r\n]*?\bname="([^"]*)"/i.exec(head);
      if (!disp) throw new TypeErrorCtor('A multipart part has no name.');
      const file = /filename="([^"]*)"/i.exec(head);
      const type = /content-type:\s*([^\r\n]*)/i.exec(head);
      if (file) form.append(disp[1], new File([content], file[1], { type: type ? type[1].trim() : '' }));
      else form.append(disp[1], decodeUtf8(content));
      pos = next;
    }
  }

