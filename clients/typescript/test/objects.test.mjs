// RetainerObjects against a real gateway built from this checkout: the
// tenant's bucket through the control plane.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { RetainerObjects, RetainerError } from '../dist/index.js';
import { startGateway, token } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

test('put, get, range, list, delete, tenants apart', async () => {
  const b = new RetainerObjects({ api: gw.api, token: token('objects-tenant') });
  const big = new Uint8Array(300000).map((_, i) => i % 251);
  const info = await b.put('reports/2026 q1.bin', big);
  assert.equal(info.key, 'reports/2026 q1.bin');
  assert.equal(info.size, 300000);
  await b.put('reports/notes.txt', 'hello');
  assert.deepEqual(new Uint8Array(await b.get('reports/2026 q1.bin')), big);
  assert.equal(new TextDecoder().decode(await b.get('reports/notes.txt', { offset: 1, length: 3 })), 'ell');
  assert.equal(new TextDecoder().decode(await b.get('reports/notes.txt', { offset: 2 })), 'llo');
  const page = await b.list('reports/');
  assert.deepEqual(page.objects.map((o) => [o.key, o.size]), [['reports/2026 q1.bin', 300000], ['reports/notes.txt', 5]]);
  const other = new RetainerObjects({ api: gw.api, token: token('objects-other') });
  assert.deepEqual((await other.list()).objects, []);
  await assert.rejects(other.get('reports/notes.txt'), (e) => e instanceof RetainerError && e.code === 'NOT_FOUND');
  await b.delete('reports/notes.txt');
  await assert.rejects(b.get('reports/notes.txt'), (e) => e instanceof RetainerError && e.code === 'NOT_FOUND');
});
