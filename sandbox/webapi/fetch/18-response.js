  // ------------------------------------------------------------ Response
  const nullBodyStatus = [101, 103, 204, 205, 304];
  const responseSocket = new WeakMap(); // response -> the client WebSocket it answers with
  let responseHeadLines;
  // checkedStatus and checkedStatusText are a ResponseInit's status and
  // statusText, checked (two functions, not one answering a pair: array
  // destructuring runs the iterator protocol, slow in the interpreter).
  function checkedStatus(init) {
    const status = init.status !== undefined ? +init.status : 200;
    if (!(status >= 200 && status <= 599) || (status | 0) !== status) throw new RangeError('The status provided (' + init.status + ') is outside the range [200, 599].');
    return status;
  }
  function checkedStatusText(init) {
    const statusText = init.statusText !== undefined ? StringCtor(init.statusText) : '';
    if (statusText !== '' && /[^\t\x20-\x7e\x80-\xff]/.test(statusText)) throw new TypeErrorCtor('Invalid statusText.');
    return statusText;
  }
  class Response {
    // #headers is null for Response.json's own headers (content-type
    // application/json alone), made when first asked for (#hdrs): an
    // invocation's answer is written from what they are (headLines)
    // without the Headers, the pair and the copies (BenchmarkInvokeJSON).
    #status; #statusText; #headers; #type; #url; #body;
    static {
      responseBody = (o) => o !== null && typeof o === 'object' && #status in o ? o.#body : undefined;
      // responseHeadLines is the header lines of an invocation's answer
      // (wireHead): Response.json's own headers, never made, from what
      // they are (as workerd writes an answer from the Response's own
      // state, whatever a program did to its getters), any others as the
      // headers getter answers them.
      responseHeadLines = (res) => #status in res && res.#headers === null ? jsonHeadLines : headerLines(res.headers);
    }
    constructor(body = null, init = {}) {
      this.#type = 'default';
      this.#url = '';
      if (body === gatewayToken) {
        // Response.json fills the other fields in.
        this.#status = 200; this.#statusText = '';
        return;
      }
      if (init === null || typeof init !== 'object') init = {};
      const ws = init.webSocket;
      let status;
      if (ws !== undefined && ws !== null) {
        // A WebSocket's answer (docs/websockets.md): status 101, no body.
        if (!isClientSocket(ws)) throw new TypeErrorCtor('webSocket must be the client end of a WebSocketPair.');
        if (+init.status !== 101) throw new RangeError('A response with a webSocket must have status 101.');
        if (body !== null && body !== undefined) throw new TypeErrorCtor('A response with a webSocket cannot have a body.');
        status = 101;
        responseSocket.set(this, ws);
      } else status = checkedStatus(init);
      this.#status = status;
      this.#statusText = checkedStatusText(init);
      this.#headers = new Headers(init.headers);
      if (body !== null && body !== undefined && nullBodyStatus.includes(status)) {
        throw new TypeErrorCtor('Response with null body status cannot have body');
      }
      const b = extractBody(body, this.#headers);
      b.used = false;
      this.#body = b;
    }
    static json(data, init = {}) {
      const text = JSONstringify(data);
      if (text === undefined) throw new TypeErrorCtor('The data is not JSON-serializable.');
      if (init && init.status !== undefined && nullBodyStatus.includes(+init.status)) throw new TypeErrorCtor('Response with null body status cannot have body');
      let headers = null; // made when asked for (#hdrs)
      if (init && init.headers !== undefined) {
        headers = new Headers(init.headers);
        if (!headers.has('content-type')) headers.set('content-type', 'application/json');
      }
      // The response takes these headers and this body as they are, and
      // only the status is checked as the constructor would: through the
      // constructor the headers were copied once more, and an empty
      // Headers and body made to be replaced (the whole of Response.json's
      // cost over new Response('ok') in an invocation was that copy,
      // ~15 us, BenchmarkInvokeJSON).
      const r = new Response(gatewayToken);
      const status = init ? init.status : undefined, statusText = init ? init.statusText : undefined;
      if (status !== undefined || statusText !== undefined) {
        const given = { status, statusText };
        r.#status = checkedStatus(given);
        r.#statusText = checkedStatusText(given);
      }
      r.#headers = headers;
      r.#body = { bytes: null, latin1: null, text, stream: null, used: false };
      return r;
    }
    static redirect(url, status = 302) {
      if (![301, 302, 303, 307, 308].includes(status)) throw new RangeError('Invalid status code ' + status + '.');
      const r = new Response(null, { status, headers: { location: normalizeURL(StringCtor(url)) } });
      return r;
    }
    static error() { const r = new Response(null, { status: 200 }); r.#type = 'error'; r.#status = 0; immutableHeaders(r.#headers); return r; }
    get status() { return this.#status; }
    get statusText() { return this.#statusText; }
    get webSocket() { return responseSocket.get(this) || null; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get headers() { return this.#hdrs(); }
    #hdrs() {
      if (this.#headers === null) this.#headers = jsonHeaders();
      return this.#headers;
    }
    get type() { return this.#type; }
    get url() { return this.#url; }
    get redirected() { return false; }
    clone() {
      const r = new Response(null, { status: this.#status === 0 ? 200 : this.#status, statusText: this.#statusText, headers: this.#hdrs() });
      r.#type = this.#type; r.#status = this.#status;
      r.#body = cloneBody(this.#body);
      return r;
    }
  }
  mixBody(Response);
  hidden(G, 'Response', Response);
  const jsonHeadLines = '1\ncontent-type\napplication/json\n';

