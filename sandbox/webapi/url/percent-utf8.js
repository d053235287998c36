// percentEncodeAfterEncoding (URL Standard) for UTF-8, the only encoding
// the URL API uses, in place of @exodus/bytes/whatwg.js: that module also
// loads the legacy single- and multi-byte encoding tables, whose set-up cost
// ~20 ms in a jitless isolate on every first use of URL.
const hex = [];
for (let i = 0; i < 256; i++) hex.push("%" + (i < 16 ? "0" : "") + i.toString(16).toUpperCase());
const maps = new Map();

function mapFor(set, spaceAsPlus) {
  const id = set + (spaceAsPlus ? "+" : "");
  let map = maps.get(id);
  if (!map) {
    map = [];
    for (let b = 0; b < 256; b++) map.push(b < 0x20 || b > 0x7e ? hex[b] : String.fromCharCode(b));
    for (let i = 0; i < set.length; i++) map[set.charCodeAt(i)] = hex[set.charCodeAt(i)];
    if (spaceAsPlus) map[0x20] = "+";
    maps.set(id, map);
  }
  return map;
}

export function percentEncodeAfterEncoding(encoding, input, percentEncodeSet, spaceAsPlus = false) {
  const enc = String(encoding).toLowerCase();
  if (enc !== "utf-8" && enc !== "utf8" && enc !== "unicode-1-1-utf-8") {
    throw new RangeError("Only UTF-8 is supported for percent-encoding here");
  }
  const map = mapFor(percentEncodeSet, spaceAsPlus);
  // UTF-8 with lone surrogates replaced, as bytes in a one-char-per-byte string.
  const bytes = unescape(encodeURIComponent(String(input).toWellFormed()));
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += map[bytes.charCodeAt(i)];
  return out;
}
