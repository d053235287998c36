// URL and URLSearchParams, installed lazily as globalThis.URL and
// URLSearchParams: lean classes (url-lean.js) over the parser of the URL
// Standard's reference implementation (whatwg-url). whatwg-url's own
// classes ride along as the reference the differential test compares with
// (sandbox/url_lean_test.go): reference() loads them when first asked for,
// so an isolate that touches URL does not initialize their WebIDL wrappers.
// The runtime installs only URL and URLSearchParams, so programs never see
// them.
export { URL, URLSearchParams } from "./url-lean.js";

let referenceClasses;
export function reference() {
  if (!referenceClasses) {
    const { URL, URLSearchParams } = require("whatwg-url");
    referenceClasses = { URL, URLSearchParams };
  }
  return referenceClasses;
}
