// URL and URLSearchParams as plain classes over whatwg-url's URL records
// (its url-state-machine and urlencoded modules do the parsing and
// serializing). whatwg-url's own classes are webidl2js wrappers: each URL
// is a wrapper, an implementation object and a URLSearchParams wrapper
// with its own implementation, and every call goes through brand checks
// and argument conversions written for any WebIDL interface. Under
// --jitless that cost ~11 µs a `new URL(request.url)` and ~2 µs a getter
// (docs/performance-log.md). These classes keep the same behaviour, step for
// step with whatwg-url 17's URL-impl and URLSearchParams-impl (the
// differential test in sandbox/url_lean_test.go runs both on the same
// operations), with private fields as the brand check and the query's
// URLSearchParams made when it is first asked for.
import * as usm from "whatwg-url/lib/url-state-machine.js";
import * as urlencoded from "whatwg-url/lib/urlencoded.js";

const surrogate = /[\uD800-\uDFFF]/;

// WebIDL's USVString conversion.
function usv(v, what) {
  if (typeof v === "symbol") throw new TypeError(`${what} is a symbol, which cannot be converted to a string.`);
  const s = String(v);
  return surrogate.test(s) ? s.toWellFormed() : s;
}

function isObject(v) {
  return (typeof v === "object" && v !== null) || typeof v === "function";
}

function need(n, got, what) {
  if (got < n) throw new TypeError(`${what}: ${n} argument${n > 1 ? "s" : ""} required, but only ${got} present.`);
}

// Reach into the other class's private state (set in static blocks).
let paramsFor, replaceList, setQuery, iterate, listOf;

export class URL {
  #url;
  #params = null; // the URLSearchParams, once asked for

  constructor(url, base = undefined) {
    need(1, arguments.length, "Failed to construct 'URL'");
    let parse = usm.basicURLParse;
    if (base === undefined && typeof url === "string") {
      // The canonical absolute http(s) URL, request.url first of all.
      const fast = usm.fastBasicURLParse(url);
      if (fast !== null) {
        this.#url = fast;
        return;
      }
      parse = usm.fullBasicURLParse; // the fast parse would refuse it again
    }
    url = usv(url, "Failed to construct 'URL': parameter 1");
    let parsedBase = null;
    if (base !== undefined) {
      base = usv(base, "Failed to construct 'URL': parameter 2");
      parsedBase = usm.basicURLParse(base);
      if (parsedBase === null) throw new TypeError(`Invalid base URL: ${base}`);
    }
    const parsed = parse(url, { baseURL: parsedBase });
    if (parsed === null) throw new TypeError(`Invalid URL: ${url}`);
    this.#url = parsed;
  }

  static parse(url, base = undefined) {
    need(1, arguments.length, "Failed to execute 'parse' on 'URL'");
    try {
      return arguments.length > 1 ? new URL(url, base) : new URL(url);
    } catch {
      return null;
    }
  }

  static canParse(url, base = undefined) {
    need(1, arguments.length, "Failed to execute 'canParse' on 'URL'");
    url = usv(url, "Failed to execute 'canParse' on 'URL': parameter 1");
    let parsedBase = null;
    if (base !== undefined) {
      parsedBase = usm.basicURLParse(usv(base, "Failed to execute 'canParse' on 'URL': parameter 2"));
      if (parsedBase === null) return false;
    }
    return usm.basicURLParse(url, { baseURL: parsedBase }) !== null;
  }

  // The query's list follows the URL record after a setter that parses a
  // query again (href, search).
  #queryChanged() {
    if (this.#params !== null) {
      replaceList(this.#params, this.#url.query === null ? [] : urlencoded.parseUrlencodedString(this.#url.query));
    }
  }

  get href() { return usm.serializeURL(this.#url); }
  set href(v) {
    v = usv(v, "Failed to set the 'href' property on 'URL'");
    const parsed = usm.basicURLParse(v);
    if (parsed === null) throw new TypeError(`Invalid URL: ${v}`);
    this.#url = parsed;
    this.#queryChanged();
  }

  get origin() { return usm.serializeURLOrigin(this.#url); }

  get protocol() { return `${this.#url.scheme}:`; }
  set protocol(v) {
    v = usv(v, "Failed to set the 'protocol' property on 'URL'");
    usm.basicURLParse(`${v}:`, { url: this.#url, stateOverride: "scheme start" });
  }

  get username() { return this.#url.username; }
  set username(v) {
    v = usv(v, "Failed to set the 'username' property on 'URL'");
    if (usm.cannotHaveAUsernamePasswordPort(this.#url)) return;
    usm.setTheUsername(this.#url, v);
  }

  get password() { return this.#url.password; }
  set password(v) {
    v = usv(v, "Failed to set the 'password' property on 'URL'");
    if (usm.cannotHaveAUsernamePasswordPort(this.#url)) return;
    usm.setThePassword(this.#url, v);
  }

  get host() {
    const url = this.#url;
    if (url.host === null) return "";
    if (url.port === null) return usm.serializeHost(url.host);
    return `${usm.serializeHost(url.host)}:${usm.serializeInteger(url.port)}`;
  }
  set host(v) {
    v = usv(v, "Failed to set the 'host' property on 'URL'");
    if (usm.hasAnOpaquePath(this.#url)) return;
    usm.basicURLParse(v, { url: this.#url, stateOverride: "host" });
  }

  get hostname() {
    return this.#url.host === null ? "" : usm.serializeHost(this.#url.host);
  }
  set hostname(v) {
    v = usv(v, "Failed to set the 'hostname' property on 'URL'");
    if (usm.hasAnOpaquePath(this.#url)) return;
    usm.basicURLParse(v, { url: this.#url, stateOverride: "hostname" });
  }

  get port() {
    return this.#url.port === null ? "" : usm.serializeInteger(this.#url.port);
  }
  set port(v) {
    v = usv(v, "Failed to set the 'port' property on 'URL'");
    if (usm.cannotHaveAUsernamePasswordPort(this.#url)) return;
    if (v === "") {
      this.#url.port = null;
    } else {
      usm.basicURLParse(v, { url: this.#url, stateOverride: "port" });
    }
  }

  get pathname() { return usm.serializePath(this.#url); }
  set pathname(v) {
    v = usv(v, "Failed to set the 'pathname' property on 'URL'");
    if (usm.hasAnOpaquePath(this.#url)) return;
    this.#url.path = [];
    usm.basicURLParse(v, { url: this.#url, stateOverride: "path start" });
  }

  get search() {
    const q = this.#url.query;
    return q === null || q === "" ? "" : `?${q}`;
  }
  set search(v) {
    v = usv(v, "Failed to set the 'search' property on 'URL'");
    const url = this.#url;
    if (v === "") {
      url.query = null;
      if (this.#params !== null) replaceList(this.#params, []);
      return;
    }
    const input = v[0] === "?" ? v.substring(1) : v;
    url.query = "";
    usm.basicURLParse(input, { url, stateOverride: "query" });
    this.#queryChanged();
  }

  get searchParams() {
    if (this.#params === null) {
      const q = this.#url.query;
      this.#params = paramsFor(this, q === null ? [] : urlencoded.parseUrlencodedString(q));
    }
    return this.#params;
  }

  // URLSearchParams writes the query it serializes here.
  static {
    setQuery = (url, query) => { url.#url.query = query; };
  }

  get hash() {
    const f = this.#url.fragment;
    return f === null || f === "" ? "" : `#${f}`;
  }
  set hash(v) {
    v = usv(v, "Failed to set the 'hash' property on 'URL'");
    if (v === "") {
      this.#url.fragment = null;
      return;
    }
    const input = v[0] === "#" ? v.substring(1) : v;
    this.#url.fragment = "";
    usm.basicURLParse(input, { url: this.#url, stateOverride: "fragment" });
  }

  toJSON() { return this.href; }
  toString() { return this.href; }
}

// WebIDL attributes and operations are enumerable.
function enumerable(proto) {
  for (const name of Object.getOwnPropertyNames(proto)) {
    if (name !== "constructor") Object.defineProperty(proto, name, { enumerable: true });
  }
}
enumerable(URL.prototype);
for (const name of ["parse", "canParse"]) Object.defineProperty(URL, name, { enumerable: true });
Object.defineProperty(URL.prototype, Symbol.toStringTag, { value: "URL", configurable: true });

const iteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));

export class URLSearchParams {
  #list;
  #url = null; // the URL whose query this is

  constructor(init = undefined) {
    const what = "Failed to construct 'URLSearchParams': parameter 1";
    if (init === undefined) {
      this.#list = [];
    } else if (isObject(init)) {
      const method = init[Symbol.iterator];
      if (method !== undefined && method !== null) {
        if (typeof method !== "function") throw new TypeError(`${what} is not iterable.`);
        const list = [];
        for (const pair of init) {
          if (!isObject(pair)) throw new TypeError(`${what} sequence's element is not an iterable object.`);
          const items = [];
          for (const item of pair) items.push(usv(item, `${what} sequence's element's element`));
          if (items.length !== 2) {
            throw new TypeError("Failed to construct 'URLSearchParams': parameter 1 sequence's element does not " +
              "contain exactly two elements.");
          }
          list.push(items);
        }
        this.#list = list;
      } else {
        // A record: own enumerable keys, converted, the last of equal keys
        // winning in the place of the first.
        const record = Object.create(null);
        for (const key of Reflect.ownKeys(init)) {
          const desc = Object.getOwnPropertyDescriptor(init, key);
          if (desc && desc.enumerable) {
            const k = usv(key, `${what} record's key`);
            record[k] = usv(init[key], `${what} record's value`);
          }
        }
        this.#list = Object.keys(record).map(k => [k, record[k]]);
      }
    } else {
      let s = usv(init, what);
      if (s[0] === "?") s = s.slice(1);
      this.#list = urlencoded.parseUrlencodedString(s);
    }
  }

  static {
    paramsFor = (url, list) => {
      const p = new URLSearchParams();
      p.#list = list;
      p.#url = url;
      return p;
    };
    replaceList = (p, list) => { p.#list = list; };
  }

  #update() {
    if (this.#url !== null) {
      const q = urlencoded.serializeUrlencoded(this.#list);
      setQuery(this.#url, q === "" ? null : q);
    }
  }

  get size() { return this.#list.length; }

  append(name, value) {
    need(2, arguments.length, "Failed to execute 'append' on 'URLSearchParams'");
    this.#list.push([usv(name, "parameter 1"), usv(value, "parameter 2")]);
    this.#update();
  }

  delete(name, value = undefined) {
    need(1, arguments.length, "Failed to execute 'delete' on 'URLSearchParams'");
    name = usv(name, "parameter 1");
    if (value !== undefined) value = usv(value, "parameter 2");
    const list = this.#list;
    let i = 0;
    while (i < list.length) {
      if (list[i][0] === name && (value === undefined || list[i][1] === value)) {
        list.splice(i, 1);
      } else {
        i++;
      }
    }
    this.#update();
  }

  get(name) {
    need(1, arguments.length, "Failed to execute 'get' on 'URLSearchParams'");
    const list = this.#list;
    // The names in the list are well-formed, so a string that equals one
    // is too: its conversion is needed only when nothing matched.
    if (typeof name === "string") {
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] === name) return list[i][1];
      }
      const converted = usv(name, "parameter 1");
      if (converted === name) return null;
      name = converted;
    } else {
      name = usv(name, "parameter 1");
    }
    for (let i = 0; i < list.length; i++) {
      if (list[i][0] === name) return list[i][1];
    }
    return null;
  }

  getAll(name) {
    need(1, arguments.length, "Failed to execute 'getAll' on 'URLSearchParams'");
    name = usv(name, "parameter 1");
    const out = [];
    for (const [k, v] of this.#list) if (k === name) out.push(v);
    return out;
  }

  has(name, value = undefined) {
    need(1, arguments.length, "Failed to execute 'has' on 'URLSearchParams'");
    name = usv(name, "parameter 1");
    if (value !== undefined) value = usv(value, "parameter 2");
    for (const [k, v] of this.#list) {
      if (k === name && (value === undefined || v === value)) return true;
    }
    return false;
  }

  set(name, value) {
    need(2, arguments.length, "Failed to execute 'set' on 'URLSearchParams'");
    name = usv(name, "parameter 1");
    value = usv(value, "parameter 2");
    const list = this.#list;
    let found = false;
    let i = 0;
    while (i < list.length) {
      if (list[i][0] === name) {
        if (found) {
          list.splice(i, 1);
        } else {
          found = true;
          list[i][1] = value;
          i++;
        }
      } else {
        i++;
      }
    }
    if (!found) list.push([name, value]);
    this.#update();
  }

  sort() {
    this.#list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    this.#update();
  }

  forEach(callback, thisArg = undefined) {
    need(1, arguments.length, "Failed to execute 'forEach' on 'URLSearchParams'");
    if (typeof callback !== "function") {
      throw new TypeError("Failed to execute 'forEach' on 'URLSearchParams': The callback provided as parameter 1 is not a function.");
    }
    // Live: a callback that changes the list changes what comes next.
    for (let i = 0; i < this.#list.length; i++) {
      const [k, v] = this.#list[i];
      callback.call(thisArg, v, k, this);
    }
  }

  static {
    iterate = (p, kind) => new ParamsIterator(p, kind);
    listOf = p => p.#list;
  }

  // Reading this.#list is the brand check: a TypeError for anything but a
  // URLSearchParams, before an iterator exists.
  entries() { this.#list; return iterate(this, "key+value"); }
  keys() { this.#list; return iterate(this, "key"); }
  values() { this.#list; return iterate(this, "value"); }

  toString() { return urlencoded.serializeUrlencoded(this.#list); }
}

URLSearchParams.prototype[Symbol.iterator] = URLSearchParams.prototype.entries;
Object.defineProperty(URLSearchParams.prototype, Symbol.iterator, { enumerable: false });
enumerable(URLSearchParams.prototype);
Object.defineProperty(URLSearchParams.prototype, Symbol.toStringTag, { value: "URLSearchParams", configurable: true });

// The pair iterator reads the live list at each step, as WebIDL's does.
class ParamsIterator {
  #params;
  #kind;
  #index = 0;
  constructor(params, kind) {
    this.#params = params;
    this.#kind = kind;
  }
  next() {
    const list = listOf(this.#params);
    if (this.#index >= list.length) return { value: undefined, done: true };
    const [k, v] = list[this.#index++];
    const value = this.#kind === "key" ? k : this.#kind === "value" ? v : [k, v];
    return { value, done: false };
  }
}
Object.setPrototypeOf(ParamsIterator.prototype, iteratorPrototype);
// As WebIDL's iterator prototype: an enumerable next, and no constructor
// of its own to reach.
delete ParamsIterator.prototype.constructor;
enumerable(ParamsIterator.prototype);
Object.defineProperty(ParamsIterator.prototype, Symbol.toStringTag, { value: "URLSearchParams Iterator", configurable: true });
