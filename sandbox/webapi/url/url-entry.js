// URL and URLSearchParams, installed lazily as globalThis.URL and
// URLSearchParams: lean classes (url-lean.js) over the parser of the URL
// Standard's reference implementation (whatwg-url). whatwg-url's own
// classes ride along as the reference the differential test compares with
// (sandbox/url_lean_test.go): reference() loads them when first asked for,
// so an isolate that touches URL does not initialize their WebIDL wrappers.
// The runtime installs only URL and URLSearchParams, so programs never see
// them, nor parsers().
export { URL, URLSearchParams } from "./url-lean.js";
import * as usm from "whatwg-url/lib/url-state-machine.js";

// parsers hands the differential test (sandbox/url_native_test.go) the
// parse without the fast path (the Go parser) and whatwg-url's own.
export function parsers() {
  return { native: usm.fullBasicURLParse, js: usm.jsBasicURLParse, serializeHost: usm.serializeHost, serializeURL: usm.serializeURL };
}

let referenceClasses;
export function reference() {
  if (!referenceClasses) {
    const { URL, URLSearchParams } = require("whatwg-url");
    referenceClasses = { URL, URLSearchParams };
  }
  return referenceClasses;
}
