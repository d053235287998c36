// A fast path in front of whatwg-url's basicURLParse (appended to its
// url-state-machine module by build/main.go). Under --jitless the full state
// machine costs ~300 µs per URL; most URLs a handler parses — request.url
// first of all — are absolute http(s) URLs already in the form the parser
// would produce. For exactly those, the URL record is split out directly;
// anything else (other schemes, a base URL, setters, IP addresses, IDNA,
// upper case, dot segments, characters the parser would percent-encode, a
// default port, a fragment) takes the full parser. The WPT URL data runs
// through both paths in sandbox/wpt_test.go.
{
  const fullBasicURLParse = module.exports.basicURLParse;
  const canonical = /^(https?):\/\/([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::([1-9][0-9]{0,4}))?(\/[A-Za-z0-9\-._~!$&'()*+,;=:@%\/]*)?(?:\?([A-Za-z0-9\-._~!$&()*+,;=:@%\/?]*))?$/;
  const endsInANumber = /(?:^|\.)(?:[0-9]+|0x[0-9a-f]*)$/;
  const dotSegment = /(?:^|\/)\.{1,2}(?:\/|$)|%2[eE]/;
  function fastParse(input) {
    if (typeof input !== "string" || input.length > 2048) return null;
    const m = canonical.exec(input);
    if (m === null) return null;
    const [, scheme, host, portText, pathText, query] = m;
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
  // url-lean.js calls it first for a string without a base: what it
  // accepts is ASCII, so the USVString conversion would not change it;
  // and when it refused the string, it would refuse the converted one too
  // (the conversion only puts U+FFFD in), so the full parser goes next.
  module.exports.fastBasicURLParse = fastParse;
  module.exports.fullBasicURLParse = fullBasicURLParse;
  module.exports.basicURLParse = function (input, options = {}) {
    if (options.url === undefined && options.stateOverride === undefined && (options.baseURL === undefined || options.baseURL === null)) {
      const fast = fastParse(input);
      if (fast !== null) return fast;
    }
    return fullBasicURLParse(input, options);
  };
}
