// A lazy front for tr46 (UTS #46 host processing). tr46 builds large
// Unicode tables when it loads (~25 ms in a jitless isolate), yet almost
// every host is plain ASCII: for those, with the non-strict options the URL
// parser uses, UTS #46 is exactly ASCII lower-casing (no ASCII character is
// mapped otherwise or disallowed without STD3 rules, and Bidi and joiner
// rules concern only non-ASCII labels). Anything else — a non-ASCII
// character, an "xn--" label, strict options — goes to the real tr46,
// loaded on first need. The WPT URL data (toascii.json included) checks it.
// The real tr46 is a runtime module of its own (js/gen/tr46.js, ~220 KB of
// Unicode tables): an isolate that touches URL compiles only the rest, and
// __retainer_load (the loader the runtime hands each module's factory,
// build/main.go) brings tr46 in when a host needs it.
let real;
function load() {
  if (!real) real = __retainer_load("tr46");
  return real;
}
function asciiFast(domain, options) {
  if (options && (options.useSTD3ASCIIRules || options.verifyDNSLength || options.checkHyphens || options.transitionalProcessing)) return null;
  for (let i = 0; i < domain.length; i++) {
    if (domain.charCodeAt(i) > 0x7f) return null;
  }
  const lower = domain.toLowerCase();
  if (/(^|\.)xn--/.test(lower)) return null;
  return lower;
}
module.exports = {
  toASCII(domain, options) {
    const fast = asciiFast(domain, options);
    return fast !== null ? fast : load().toASCII(domain, options);
  },
  toUnicode(domain, options) {
    return load().toUnicode(domain, options);
  },
};
