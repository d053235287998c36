package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v8 "rogchap.com/v8go"
)

// The runtime's URL and URLSearchParams (webapi/url/url-lean.js) against
// whatwg-url's own classes, the reference the bundle carries for this test:
// every WPT URL input with every getter, every WPT setter case, then
// URLSearchParams built every way and driven through a long deterministic
// run of operations, alone and attached to a URL. Each step compares every
// observable: values, what throws (and as what), and the serializations.
const urlDiffHarness = `(() => {
const lean = { URL: __urlModule.URL, URLSearchParams: __urlModule.URLSearchParams };
const ref = { URL: __urlModule.reference().URL, URLSearchParams: __urlModule.reference().URLSearchParams };
const failures = [];
const fields = ['href', 'origin', 'protocol', 'username', 'password', 'host', 'hostname', 'port', 'pathname', 'search', 'hash'];
function attempt(f) {
  try { return { ok: f() }; } catch (e) { return { threw: e instanceof TypeError ? 'TypeError' : String(e && e.name) }; }
}
function same(what, a, b) {
  const x = JSON.stringify(a), y = JSON.stringify(b);
  if (x !== y) failures.push(what + ': ' + x + ' (lean) vs ' + y + ' (whatwg-url)');
  return x === y;
}
function snapURL(u) {
  const o = {};
  for (const f of fields) o[f] = u[f];
  o.json = u.toJSON(); o.string = String(u);
  o.params = [...u.searchParams]; o.paramsString = u.searchParams.toString(); o.size = u.searchParams.size;
  return o;
}
function snapParams(p) { return { list: [...p], keys: [...p.keys()], values: [...p.values()], string: p.toString(), size: p.size }; }

// Every WPT URL input, with and without its base.
for (const c of __data.urltestdata) {
  if (typeof c === 'string') continue;
  const args = c.base === null || c.base === undefined ? [c.input] : [c.input, c.base];
  const a = attempt(() => snapURL(new lean.URL(...args)));
  const b = attempt(() => snapURL(new ref.URL(...args)));
  same('new URL(' + JSON.stringify(args) + ')', a, b);
  same('URL.canParse(' + JSON.stringify(args) + ')', lean.URL.canParse(...args), ref.URL.canParse(...args));
  same('URL.parse(' + JSON.stringify(args) + ')', lean.URL.parse(...args) === null, ref.URL.parse(...args) === null);
}
// Every WPT setter case, then the query both ways.
for (const [setter, cases] of Object.entries(__data.setters)) {
  if (setter === 'comment') continue;
  for (const c of cases) {
    const u1 = new lean.URL(c.href), u2 = new ref.URL(c.href);
    u1.searchParams; u2.searchParams; // made before the setter: it must follow
    const a = attempt(() => { u1[setter] = c.new_value; return snapURL(u1); });
    const b = attempt(() => { u2[setter] = c.new_value; return snapURL(u2); });
    same(setter + ' = ' + JSON.stringify(c.new_value) + ' on ' + c.href, a, b);
  }
}

// A deterministic run of operations.
let seed = 42;
function rand(n) { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; }
const atoms = ['a', 'b', 'a b', '+', '%', '%41', '%zz', '=', '&', '?', '#', 'é', '\uD83D\uDE00', '\uD800', '', 'z', 'A', '~*'];
function word() { let s = ''; const n = rand(3); for (let i = 0; i <= n; i++) s += atoms[rand(atoms.length)]; return s; }
const inits = [undefined, '', '?', '?a=b', 'a=b&c=d&a=e', 'a', '=b', 'a=b=c', '&&a&&', 'a+b=c+d', 'x=%41%zz%', '%F0%9F%98%80=%FF',
  'é=ü', '\uD800=\uDC00', [['a', 'b'], ['c', 'd']], [], [['a', 'b', 'c']], [['a']], [[1, 2]], { a: 'b', 2: 'x', 1: 'y', b: null },
  { '\uD800': 'x', '\uFFFD': 'y' }, Object.create({ inherited: 'no' }), new Map([['m', 'n']]), 42, null, true,
  { [Symbol.iterator]: 5 }];
for (const init of inits) {
  const label = 'new URLSearchParams(' + (typeof init === 'object' && init !== null ? JSON.stringify(Array.isArray(init) || init instanceof Map ? [...init] : init) : String(init)) + ')';
  same(label, attempt(() => snapParams(new lean.URLSearchParams(init))), attempt(() => snapParams(new ref.URLSearchParams(init))));
}
same('from a URLSearchParams', snapParams(new lean.URLSearchParams(new lean.URLSearchParams('a=1&b=2'))),
  snapParams(new ref.URLSearchParams(new ref.URLSearchParams('a=1&b=2'))));
function drive(label, p1, p2, after) {
  for (let step = 0; step < 400; step++) {
    const op = rand(9), n = word(), v = word(), withValue = rand(2) === 0;
    const run = p => {
      switch (op) {
        case 0: return p.append(n, v);
        case 1: return withValue ? p.delete(n, v) : p.delete(n);
        case 2: return p.set(n, v);
        case 3: return p.get(n);
        case 4: return p.getAll(n);
        case 5: return withValue ? p.has(n, v) : p.has(n);
        case 6: return p.sort();
        case 7: { const seen = []; p.forEach((val, key, self) => { seen.push([key, val, self === p]); }); return seen; }
        case 8: return [...p.entries()];
      }
    };
    const what = label + ' step ' + step + ' op ' + op + ' ' + JSON.stringify([n, v, withValue]);
    if (!same(what, attempt(() => run(p1)), attempt(() => run(p2)))) return;
    if (!same(what + ' then', snapParams(p1), snapParams(p2))) return;
    if (after && !same(what + ' the URL', after[0](), after[1]())) return;
  }
}
drive('alone', new lean.URLSearchParams('a=1&b=2&a=3'), new ref.URLSearchParams('a=1&b=2&a=3'));
for (const href of ['http://h/p?x=1&y=%20#f', 'http://h/p', 'sc:opaque path?q', 'file:///a?b']) {
  const u1 = new lean.URL(href), u2 = new ref.URL(href);
  drive('attached to ' + href, u1.searchParams, u2.searchParams, [() => snapURL(u1), () => snapURL(u2)]);
  u1.search = '?k=v&k=w'; u2.search = '?k=v&k=w';
  same('after search on ' + href, snapURL(u1), snapURL(u2));
  u1.href = 'http://other/?n=1'; u2.href = 'http://other/?n=1';
  same('after href on ' + href, snapURL(u1), snapURL(u2));
  u1.search = ''; u2.search = '';
  same('after empty search on ' + href, snapURL(u1), snapURL(u2));
}
// A name with a lone surrogate reads the entry its conversion names.
for (const op of ['get', 'getAll', 'has']) {
  for (const [init, name] of [['a%EF%BF%BD=1&b=2', 'a\uD800'], ['\uFFFD=x', '\uDC00'], ['a=1', 'a\uD800'], ['a=1', 'a']]) {
    same(op + '(' + JSON.stringify(name) + ') on ' + init, new lean.URLSearchParams(init)[op](name), new ref.URLSearchParams(init)[op](name));
  }
}
// The iterator is live, as WebIDL's is.
for (const C of [lean, ref]) {
  const p = new C.URLSearchParams('a=1&b=2');
  const it = p.entries();
  it.next(); p.append('c', '3');
  C.live = [...{ [Symbol.iterator]() { return it; } }];
}
same('a live iterator', lean.live, ref.live);
// What throws, and as what.
const misuse = [
  C => new C.URL(), C => C.URLSearchParams.prototype.get.call({}, 'a'), C => Object.getOwnPropertyDescriptor(C.URL.prototype, 'href').get.call({}),
  C => new C.URLSearchParams().append('a'), C => new C.URLSearchParams().get(), C => new C.URLSearchParams().forEach(5),
  C => new C.URL(Symbol()), C => new C.URL('http://a/', 'not a url'), C => { new C.URL('http://a/').href = 'nope'; },
  C => new C.URLSearchParams().append(Symbol(), 'x'), C => C.URL.canParse(), C => String(new C.URL('http://a/'))];
misuse.forEach((f, i) => same('misuse ' + i, attempt(() => f(lean)), attempt(() => f(ref))));
same('lengths', [lean.URL.length, lean.URLSearchParams.length, lean.URL.prototype.toJSON.length, lean.URLSearchParams.prototype.delete.length, lean.URLSearchParams.prototype.append.length],
  [ref.URL.length, ref.URLSearchParams.length, ref.URL.prototype.toJSON.length, ref.URLSearchParams.prototype.delete.length, ref.URLSearchParams.prototype.append.length]);
same('toStringTag', [Object.prototype.toString.call(new lean.URL('http://a/')), Object.prototype.toString.call(new lean.URLSearchParams()), Object.prototype.toString.call(new lean.URLSearchParams().keys())],
  [Object.prototype.toString.call(new ref.URL('http://a/')), Object.prototype.toString.call(new ref.URLSearchParams()), Object.prototype.toString.call(new ref.URLSearchParams().keys())]);
// The same enumerable members (in IDL order in the lean classes; webidl2js
// puts operations first).
const members = C => [Object.keys(C.URL.prototype).sort(), Object.keys(C.URLSearchParams.prototype).sort(), Object.keys(C.URL).sort(), Object.keys(C.URLSearchParams).sort()];
same('enumerable', members(lean), members(ref));
const iteratorShape = C => {
  const proto = Object.getPrototypeOf(new C.URLSearchParams('a=1').entries());
  return [Object.getOwnPropertyNames(proto).map(n => [n, Object.getOwnPropertyDescriptor(proto, n).enumerable]).sort(),
    Object.getPrototypeOf(proto) === Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())), proto.constructor === Object];
};
same('the iterator prototype', iteratorShape(lean), iteratorShape(ref));
return JSON.stringify(failures.slice(0, 40));
})()`

func TestURLLeanMatchesWhatwgURL(t *testing.T) {
	urltestdata, err := os.ReadFile(filepath.Join(wptDir, "urltestdata.json"))
	if err != nil {
		t.Fatal(err)
	}
	setters, err := os.ReadFile(filepath.Join(wptDir, "setters_tests.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := runWithURLModule(t, "globalThis.__data = {urltestdata: "+string(urltestdata)+", setters: "+string(setters)+"}", urlDiffHarness)
	var failures []string
	if err := json.Unmarshal([]byte(out), &failures); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// runWithURLModule runs scripts one after another in a fresh isolate whose
// global __urlModule holds the runtime's url module (loaded as the runtime
// loads it, hostLoad, with the tr46 module on first need): its URL and
// URLSearchParams, and whatwg-url's from reference(). It answers the last script's
// value as a string.
func runWithURLModule(tb testing.TB, scripts ...string) string {
	m, err := newVM(engine(tb), 256, false)
	if err != nil {
		tb.Fatal(err)
	}
	type answer struct {
		out string
		err error
	}
	ch := make(chan answer, 1)
	m.submit(func() {
		defer m.kill()
		ch <- func() answer {
			// The runtime's loader for a module's factory (loadModule in
			// the bootstrap): hostLoad, then the factory with the loader
			// and the definers (here V8's own: no program runs first).
			var loader *v8.Function
			native, err := m.ctx.RunScript(`({ parse: (input, base) => __urlParse(input, base) })`, "native.js")
			if err != nil {
				return answer{err: err}
			}
			definers, err := m.ctx.RunScript(`({ defineProperty: Object.defineProperty, defineProperties: Object.defineProperties, reflectDefineProperty: Reflect.defineProperty })`, "definers.js")
			if err != nil {
				return answer{err: err}
			}
			parse := v8.NewFunctionTemplate(m.iso, func(info *v8.FunctionCallbackInfo) *v8.Value {
				v, err := coldHostNamed(tb, "urlParse")(m, info.Args())
				if err != nil {
					return m.throw(err.Error())
				}
				return v
			}).GetFunction(m.ctx)
			if err := m.ctx.Global().Set("__urlParse", parse); err != nil {
				return answer{err: err}
			}
			load := func(name *v8.Value) (*v8.Value, error) {
				if name.String() == "url-native" { // the bootstrap's modules['url-native']
					return native, nil
				}
				factory, err := m.hostLoad([]*v8.Value{name})
				if err != nil {
					return nil, err
				}
				fn, err := factory.AsFunction()
				if err != nil {
					return nil, err
				}
				return fn.Call(v8.Undefined(m.iso), loader, definers)
			}
			loader = v8.NewFunctionTemplate(m.iso, func(info *v8.FunctionCallbackInfo) *v8.Value {
				v, err := load(info.Args()[0])
				if err != nil {
					return m.throw(err.Error())
				}
				return v
			}).GetFunction(m.ctx)
			name, err := v8.NewValue(m.iso, "url")
			if err != nil {
				return answer{err: err}
			}
			exports, err := load(name)
			if err != nil {
				return answer{err: err}
			}
			if err := m.ctx.Global().Set("__urlModule", exports); err != nil {
				return answer{err: err}
			}
			var last *v8.Value
			for i, src := range scripts {
				if last, err = m.ctx.RunScript(src, fmt.Sprintf("script-%d.js", i)); err != nil {
					return answer{err: err}
				}
			}
			return answer{out: last.String()}
		}()
	})
	a := <-ch
	if a.err != nil {
		tb.Fatal(a.err)
	}
	return a.out
}

// coldHostNamed is the cold host function the runtime asks for by name.
func coldHostNamed(t testing.TB, name string) func(*vm, []*v8.Value) (*v8.Value, error) {
	for _, h := range coldHost {
		if h.name == name {
			return h.f
		}
	}
	t.Fatalf("no cold host function %q", name)
	return nil
}
