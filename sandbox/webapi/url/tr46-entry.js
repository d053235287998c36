// UTS #46 host processing (tr46), a runtime module of its own: the url
// module loads it on first need (tr46-lazy.js).
export { toASCII, toUnicode } from "tr46";
