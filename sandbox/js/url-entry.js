// The URL Standard's reference implementation (whatwg-url), installed
// lazily as globalThis.URL and URLSearchParams.
export { URL, URLSearchParams } from "whatwg-url";
