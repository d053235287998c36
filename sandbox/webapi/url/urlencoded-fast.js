// A fast path in front of whatwg-url's parseUrlencodedString (appended to
// its urlencoded module by build/main.go): for a string of printable ASCII
// without '%' or '+', UTF-8 encoding, percent-decoding, '+' replacement and
// UTF-8 decoding are all the identity, so the byte-level parser (slow under
// --jitless: Uint8Array slices and a TextDecoder per name and value) is
// skipped. Anything else takes the full parser.
{
  const fullParse = module.exports.parseUrlencodedString;
  const plain = /^[\x20-\x24\x26-\x2a\x2c-\x7e]*$/;
  module.exports.parseUrlencodedString = function (input) {
    if (typeof input !== "string" || !plain.test(input)) return fullParse(input);
    const output = [];
    const pairs = input.split("&");
    for (let i = 0; i < pairs.length; i++) { // indexed: no array iterator
      const pair = pairs[i];
      if (pair === "") continue;
      const eq = pair.indexOf("=");
      output.push(eq >= 0 ? [pair.substring(0, eq), pair.substring(eq + 1)] : [pair, ""]);
    }
    return output;
  };
}
