package sandbox

import "testing"

// TestHeaderChecksRemembered: the runtime remembers the header names and
// values it has checked (so the regular expressions run once per distinct
// string), and what it remembers never lets through what the check refuses
// or changes what it answers: a name's case, a value's trimming, a bad
// string after a good one, and more distinct strings than it keeps.
func TestHeaderChecksRemembered(t *testing.T) {
	runCases(t, []jsCase{
		{"names come out lower case each time", `() => { const h = new Headers(); h.set('X-Mixed', 'a'); h.set('x-mixed', 'b'); h.append('X-MIXED', 'c'); return [...h] }`, `[["x-mixed","b, c"]]`},
		{"a value with whitespace is trimmed each time", `() => { const h = new Headers(); h.set('a', ' v '); h.set('b', ' v '); h.set('c', 'v'); return [...h] }`, `[["a","v"],["b","v"],["c","v"]]`},
		{"a bad name after good ones throws", `() => { const h = new Headers(); h.set('ok', '1'); try { h.set('bad name', '1'); return 'accepted' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"a bad value after good ones throws", `() => { const h = new Headers(); h.set('a', 'x'); h.set('a', 'x'); try { h.set('a', 'x\ny'); return 'accepted' } catch (e) { return e.constructor.name } }`, `"TypeError"`},
		{"more distinct strings than are kept", `() => { const seen = []; for (let i = 0; i < 600; i++) { const h = new Headers(); h.append('X-N' + i, ' v' + i); h.append('Y', 'w' + i); seen.push(h.get('x-n' + i) === 'v' + i && h.get('y') === 'w' + i); } let bad = 0; for (const s of ['a b', 'c\u0100']) { try { new Headers().set(s, 'v'); } catch (e) { bad++ } try { new Headers().set('ok', s + '\rx'); } catch (e) { bad++ } } return [seen.every(Boolean), bad] }`, `[true,4]`},
		{"what a program changes does not reach what is remembered", `() => { const h = new Headers(); h.set('ok', 'v'); Map.prototype.get = () => 'x'; Set.prototype.has = () => true; Object.defineProperty(Object.prototype, 'bad name', { get() { return 'x' } }); Object.defineProperty(Object.prototype, 'v\nw', { get() { return true } }); let bad = 0; try { h.set('bad name', 'v'); } catch (e) { bad++ } try { h.set('ok', 'v\nw'); } catch (e) { bad++ } return [bad, h.get('ok')] }`, `[2,"v"]`},
		{"set keeps one of each name", `() => { const h = new Headers([['a', '1'], ['b', '2'], ['a', '3']]); h.set('a', '4'); return [...h] }`, `[["a","4"],["b","2"]]`},
		{"a number converts the same way twice", `() => { const h = new Headers(); h.set('n', 1); h.set('m', 1); return [h.get('n'), h.get('m'), h.has('N'), h.has('z')] }`, `["1","1",true,false]`},
	})
}
