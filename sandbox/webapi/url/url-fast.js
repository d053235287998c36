// Two fast paths in front of whatwg-url's basicURLParse (appended to its
// url-state-machine module by build/main.go). Under --jitless the full state
// machine costs 30–300 µs per URL. Most URLs a handler parses — request.url
// first of all — are absolute http(s) URLs already in the form the parser
// would produce: for exactly those, the URL record is split out directly
// here. Anything else without a state override (other schemes, a base URL,
// IP addresses, upper case, dot segments, characters the parser would
// percent-encode, a default port, a fragment) goes to the Go parser
// (internal/urlparse). The setters (a state override) keep the state
// machine. The WPT URL data runs through every path in sandbox/wpt_test.go,
// and sandbox/url_native_test.go holds the Go parser to this one.
{
  const stateMachineParse = module.exports.basicURLParse;
  const canonical = /^(https?):\/\/([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::([1-9][0-9]{0,4}))?(\/[A-Za-z0-9\-._~!$&'()*+,;=:@%\/]*)?(?:\?([A-Za-z0-9\-._~!$&()*+,;=:@%\/?]*))?$/;
  const endsInANumber = /(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)$/;
  const dotSegment = /(?:^|\/)\.{1,2}(?:\/|$)|%2[eE]/;
  function fastParse(input) {
    if (typeof input !== "string" || input.length > 2048) return null;
    const m = canonical.exec(input);
    if (m === null) return null;
    // Indexed, not destructured (the array iterator is dear under --jitless).
    const scheme = m[1], host = m[2], portText = m[3], pathText = m[4], query = m[5];
    if (endsInANumber.test(host) || host.includes("xn--")) return null;
    let port = null;
    if (portText !== undefined) {
      port = Number(portText);
      if (port > 65535 || port === (scheme === "http" ? 80 : 443)) return null;
    }
    if (pathText !== undefined && dotSegment.test(pathText)) return null;
    return {
      scheme, username: "", password: "", host, port,
      path: pathText === undefined ? [""] : pathText.substring(1).split("/"),
      query: query === undefined ? null : query,
      fragment: null
    };
  }
  // nativeParse is the parse without the fast path: the Go parser
  // (internal/urlparse: 6–14 µs with the host call, where this state
  // machine takes 30–110 µs under --jitless), and this state machine where
  // the Go side defers (a special URL's host that needs IDNA). The record it builds is the one
  // the state machine would: a host is kept as its serialization, which is
  // all serializeHost and the setters read of it.
  let nativeURLParse = null;
  function nativeParse(input, baseURL) {
    if (nativeURLParse === null) nativeURLParse = __retainer_load("url-native").parse;
    const base = baseURL === undefined || baseURL === null ? "" : module.exports.serializeURL(baseURL);
    // A URL longer than the Go side takes (urlparse.MaxLength, 4 KiB; it
    // counts bytes and defers what is longer) stays here, under the
    // isolate's limits, and is never copied out.
    if (input.length + base.length > 4096) return stateMachineParse(input, { baseURL });
    const wire = nativeURLParse(input, base);
    if (wire === "") return null;
    if (wire === "?") return stateMachineParse(input, { baseURL });
    // Indexed, not destructured: under --jitless destructuring runs the
    // array iterator, a third of this function's time.
    const f = wire.split("\n");
    const host = f[3], port = f[4], path = f[5], query = f[6], fragment = f[7];
    return {
      scheme: f[0], username: f[1], password: f[2],
      host: host === "" ? null : host.substring(1),
      port: port === "" ? null : +port,
      path: path === "" ? [] : path.charCodeAt(0) === 0x27 ? path.substring(1) : path.substring(1).split("/"),
      query: query === "" ? null : query.substring(1),
      fragment: fragment === "" ? null : fragment.substring(1)
    };
  }
  // url-lean.js calls fastBasicURLParse first for a string without a base:
  // what it accepts is ASCII, so the USVString conversion would not change
  // it; and when it refused the string, it would refuse the converted one
  // too (the conversion only puts U+FFFD in), so the parse without the fast
  // path goes next. jsBasicURLParse is whatwg-url's own, the reference of
  // the differential test (sandbox/url_native_test.go).
  module.exports.fastBasicURLParse = fastParse;
  module.exports.fullBasicURLParse = (input, options = {}) => nativeParse(input, options.baseURL === undefined ? null : options.baseURL);
  module.exports.jsBasicURLParse = stateMachineParse;
  module.exports.basicURLParse = function (input, options = {}) {
    if (options.url === undefined && options.stateOverride === undefined) {
      const base = options.baseURL === undefined ? null : options.baseURL;
      if (base === null) {
        const fast = fastParse(input);
        if (fast !== null) return fast;
      }
      return nativeParse(input, base);
    }
    return stateMachineParse(input, options);
  };
}
