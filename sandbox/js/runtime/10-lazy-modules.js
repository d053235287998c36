  // ------------------------------------------------------------ lazy modules
  // npm-bundled parts are compiled on first touch of one of their globals.
  const hostLoad = coldHost('load');
  const modules = {};
  // The URL module's Go parser (webapi/url: url-fast.js, url.go).
  {
    const i = coldIndex.indexOf('urlParse');
    modules['url-native'] = freeze({ parse: (input, base) => host.op(i, input, base) });
  }
  // A module's factory gets loadModule, for the modules it loads on first
  // need (url loads tr46 for a host that is not plain ASCII), and the
  // runtime's definers, which it defines properties with (00-prelude.js).
  function loadModule(name) {
    if (!modules[name]) modules[name] = hostLoad(name)(loadModule, ownDefiners);
    return modules[name];
  }
  // lazyGlobal defines G[name] as made on first touch by make(): an accessor
  // until then, a data property like hidden()'s after (assigning it first
  // replaces it unmade). The runtime modules and the globals a computation
  // seldom touches are made this way, so that an isolate starts without
  // them (docs/performance-log.md).
  function lazyGlobal(name, make) { lazyProperty(G, name, make); }
  function lazyProperty(obj, name, make) {
    defineProperty(obj, name, {
      configurable: true, enumerable: false,
      get() {
        const value = make();
        try { hidden(obj, name, value); } catch (e) { /* a frozen object keeps the accessor */ }
        return value;
      },
      set(value) { hidden(obj, name, value); },
    });
  }
  // once(make) answers make()'s value, made on the first call.
  function once(make) {
    let made = false, value;
    return () => {
      if (!made) { value = make(); made = true; }
      return value;
    };
  }
  for (const n of ['URL', 'URLSearchParams']) lazyGlobal(n, () => loadModule('url')[n]);
  const streamNames = ['ReadableStream', 'ReadableStreamDefaultReader', 'ReadableStreamBYOBReader',
    'ReadableStreamDefaultController', 'ReadableByteStreamController', 'ReadableStreamBYOBRequest',
    'WritableStream', 'WritableStreamDefaultWriter', 'WritableStreamDefaultController',
    'TransformStream', 'TransformStreamDefaultController', 'ByteLengthQueuingStrategy', 'CountQueuingStrategy'];
  for (const n of streamNames) lazyGlobal(n, () => loadModule('streams')[n]);
  // Instance checks that must not load a module just to answer "no".
  function isURLSearchParams(v) { return !!modules.url && v instanceof modules.url.URLSearchParams; }
  function isReadableStream(v) { return !!modules.streams && v instanceof modules.streams.ReadableStream; }
  // A relative URL resolves against `location.href` when the program
  // defines a `location` (as Deno's --location); otherwise it is a TypeError,
  // as in workerd (docs/decisions.md).
  function baseURL() {
    const loc = G.location;
    if (loc === null || (typeof loc !== 'object' && typeof loc !== 'string')) return undefined;
    const href = typeof loc === 'string' ? loc : loc.href;
    return typeof href === 'string' ? href : undefined;
  }
  function normalizeURL(u, base = baseURL()) {
    try { return base === undefined ? new (loadModule('url').URL)(u).href : new (loadModule('url').URL)(u, base).href; }
    catch (e) { throw new TypeErrorCtor('Invalid URL: ' + StringCtor(u)); }
  }

