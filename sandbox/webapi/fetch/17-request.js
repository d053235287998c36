  // ------------------------------------------------------------ Request
  const forbiddenMethods = ['CONNECT', 'TRACE', 'TRACK'];
  const methods = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH'];
  const gatewayToken = {}; // reachable only here: no program can pass it
  // requestMethod is a Request's method as the Fetch Standard normalizes
  // it (the common ones are already normalized), or a TypeError.
  function requestMethod(method) {
    if (methods.includes(method)) return method;
    if (!tokenRe.test(method)) throw new TypeErrorCtor('Invalid method "' + method + '".');
    if (methods.includes(method.toUpperCase()) && method.toUpperCase() !== 'PATCH') method = method.toUpperCase();
    if (forbiddenMethods.includes(method.toUpperCase())) throw new TypeErrorCtor('Forbidden method "' + method + '".');
    return method;
  }
  // gatewayRequest makes the Request of an invocation (invoke): its url
  // (taken as the gateway gives it) and headers come from the gateway,
  // already checked, and its method is normalized as the constructor
  // would; none of the constructor's option handling runs. Its Headers
  // are made from the invocation's lines when first asked for (#hdrs):
  // most handlers never read them, and making them was the largest part
  // of an invocation's own JavaScript besides the handler's
  // (docs/history/performance-log.md, "The worker's CPU a request").
  let gatewayRequest;
  // isRealRequest is the brand check: an object made from Request.prototype
  // by hand passes instanceof but holds none of the private fields, and
  // its url never went through the URL check.
  let isRealRequest, requestParts;
  // RequestInit's enumerations (WebIDL: any other string is a TypeError).
  const requestEnums = {
    mode: ['same-origin', 'no-cors', 'cors', 'navigate'],
    credentials: ['omit', 'same-origin', 'include'],
    cache: ['default', 'no-store', 'reload', 'no-cache', 'force-cache', 'only-if-cached'],
    redirect: ['follow', 'error', 'manual'],
    referrerPolicy: ['', 'no-referrer', 'no-referrer-when-downgrade', 'same-origin', 'origin', 'strict-origin',
      'origin-when-cross-origin', 'strict-origin-when-cross-origin', 'unsafe-url'],
    duplex: ['half'],
    priority: ['high', 'low', 'auto'],
  };
  function requestEnum(init, name, fallback) {
    const v = init[name];
    if (v === undefined) return fallback;
    const str = StringCtor(v);
    if (!requestEnums[name].includes(str)) throw new TypeErrorCtor('Invalid RequestInit ' + name + ': "' + str + '".');
    return str;
  }
  const defaultRequestAttrs = freeze({ mode: 'cors', credentials: 'same-origin', cache: 'default', referrer: 'about:client',
    referrerPolicy: '', integrity: '', keepalive: false, priority: 'auto' });
  class Request {
    #url; #method; #headers; #signal; #redirect;
    // An invocation's request lines, its headers' source until #hdrs
    // makes them (gatewayRequest); undefined for any other Request.
    #lines;
    // Attributes a server runtime keeps only to answer them (the gateway's
    // fetch has no cache, credentials or referrer of its own).
    // They live together in one object, which no code changes once a
    // constructor has set it (a clone shares it): a Request made for an
    // invocation takes the defaults' object instead of eight fields of its
    // own, each of which V8 defines on every new Request.
    #attrs = defaultRequestAttrs;
    #body;
    static {
      requestBody = (o) => o !== null && typeof o === 'object' && #url in o ? o.#body : undefined;
      isRealRequest = (x) => x !== null && typeof x === 'object' && #url in x;
      // fetch reads the fields themselves: a program may redefine the getters.
      requestParts = (x) => ({ url: x.#url, method: x.#method, headers: x.#hdrs(), redirect: x.#redirect });
      // lines are invoke's: the header count at 4, then names and values.
      gatewayRequest = (url, method, lines) => {
        const r = new Request(gatewayToken);
        r.#url = url; r.#method = requestMethod(method); r.#lines = lines;
        return r;
      };
    }
    constructor(input, init = {}) {
      if (input === gatewayToken) {
        // gatewayRequest fills the fields in.
        this.#redirect = 'follow';
        this.#body = { bytes: null, latin1: null, text: null, stream: null, used: false };
        return;
      }
      if (init === null || typeof init !== 'object') init = {};
      let src = null;
      const a = { ...defaultRequestAttrs };
      if (isRealRequest(input)) { src = input; this.#url = input.#url; }
      else if (input instanceof Request) throw new TypeErrorCtor('The input is not a Request (an object made from Request.prototype is not one).');
      else this.#url = normalizeURL(StringCtor(input));
      if (src) {
        a.mode = src.#attrs.mode === 'navigate' ? 'same-origin' : src.#attrs.mode;
        a.credentials = src.#attrs.credentials; a.cache = src.#attrs.cache; a.referrer = src.#attrs.referrer;
        a.referrerPolicy = src.#attrs.referrerPolicy; a.integrity = src.#attrs.integrity;
        a.keepalive = src.#attrs.keepalive; a.priority = src.#attrs.priority;
      }
      if (init.referrer !== undefined) {
        const r = StringCtor(init.referrer);
        a.referrer = r === '' ? '' : normalizeURL(r);
      }
      a.referrerPolicy = requestEnum(init, 'referrerPolicy', a.referrerPolicy);
      const mode = requestEnum(init, 'mode', undefined);
      if (mode === 'navigate') throw new TypeErrorCtor('A Request cannot be made with mode "navigate".');
      if (mode !== undefined) a.mode = mode;
      a.credentials = requestEnum(init, 'credentials', a.credentials);
      a.cache = requestEnum(init, 'cache', a.cache);
      if (a.cache === 'only-if-cached' && a.mode !== 'same-origin') throw new TypeErrorCtor('cache "only-if-cached" needs mode "same-origin".');
      this.#redirect = requestEnum(init, 'redirect', src ? src.#redirect : 'follow');
      if (init.integrity !== undefined) a.integrity = StringCtor(init.integrity);
      if (init.keepalive !== undefined) a.keepalive = !!init.keepalive;
      const duplex = requestEnum(init, 'duplex', undefined);
      a.priority = requestEnum(init, 'priority', a.priority);
      const method = requestMethod(init.method !== undefined ? StringCtor(init.method) : src ? src.#method : 'GET');
      if (a.mode === 'no-cors' && !['GET', 'HEAD', 'POST'].includes(method)) throw new TypeErrorCtor('Method "' + method + '" is not allowed with mode "no-cors".');
      this.#method = method;
      this.#attrs = a;
      const headersInit = init.headers !== undefined ? init.headers : src ? src.#hdrs() : undefined;
      if (a.mode === 'no-cors') {
        // The "request-no-cors" guard: only CORS-safelisted headers stay.
        this.#headers = noCorsHeaders();
        if (headersInit !== undefined) for (const [k, v] of new Headers(headersInit)) this.#headers.append(k, v);
      } else {
        this.#headers = new Headers(headersInit);
      }
      let b = { bytes: null, latin1: null, text: null, stream: null, used: false };
      const sb = src ? src.#body : null;
      if (init.body !== undefined && init.body !== null) {
        if (method === 'GET' || method === 'HEAD') throw new TypeErrorCtor('Request with GET/HEAD method cannot have body.');
        b = extractBody(init.body, this.#headers);
        b.used = false;
        if (b.stream && a.keepalive) throw new TypeErrorCtor('A keepalive request cannot have a stream body.');
        // duplex is not required for a stream body, unlike the Fetch
        // Standard: Workers code sends request.body on without it.
        void duplex;
        if (hasBody(sb)) sb.used = true; // the input's body is disturbed all the same
      } else if (hasBody(sb)) {
        if (bodyUsed(sb)) throw new TypeErrorCtor('Body has already been used.');
        if (method === 'GET' || method === 'HEAD') throw new TypeErrorCtor('Request with GET/HEAD method cannot have body.');
        // The body moves to the new request behind a proxy: the input keeps
        // its (now disturbed) stream, the new request has a stream of its
        // own, made when first asked for.
        b = { bytes: sb.bytes, latin1: sb.latin1, text: sb.text, stream: sb.stream, used: false, proxy: !!sb.stream, ascii: !!sb.ascii, wf: !!sb.wf };
        sb.used = true;
      }
      this.#body = b;
      // Made on first read: most handlers never look at it.
      this.#signal = init.signal !== undefined && init.signal !== null ? init.signal : src ? src.signal : undefined;
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#hdrs(); }
    // #hdrs is the request's Headers, made from an invocation's lines the
    // first time they are asked for.
    #hdrs() {
      if (this.#headers === undefined && this.#lines !== undefined) {
        const lines = this.#lines;
        this.#lines = undefined;
        this.#headers = trustedHeaders(lines, 5, +lines[4]);
      }
      return this.#headers;
    }
    get signal() {
      if (this.#signal === undefined) this.#signal = newSignal();
      return this.#signal;
    }
    get redirect() { return this.#redirect; }
    get cache() { return this.#attrs.cache; }
    get credentials() { return this.#attrs.credentials; }
    get mode() { return this.#attrs.mode; }
    get destination() { return ''; }
    get referrer() {
      if (this.#attrs.referrer === '') return '';
      return this.#attrs.referrer === 'about:client' ? 'about:client' : this.#attrs.referrer;
    }
    get referrerPolicy() { return this.#attrs.referrerPolicy; }
    get integrity() { return this.#attrs.integrity; }
    get keepalive() { return this.#attrs.keepalive; }
    get isReloadNavigation() { return false; }
    get isHistoryNavigation() { return false; }
    get duplex() { return 'half'; }
    clone() {
      const body = cloneBody(this.#body);
      const r = new Request(this.#url, { method: this.#method, signal: this.#signal });
      r.#headers = copyHeaders(this.#hdrs());
      r.#redirect = this.#redirect; r.#attrs = this.#attrs;
      r.#body = body;
      return r;
    }
  }
  mixBody(Request);
  hidden(G, 'Request', Request);

