// RetainerSQL against a real gateway built from this checkout: POST /sql
// and GET /sql/export as the token's tenant.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { RetainerSQL, RetainerError } from '../dist/index.js';
import { startGateway, token } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

test('query, batch all or nothing, tenants apart, export', async () => {
  const db = new RetainerSQL({ api: gw.api, token: token('sql-tenant') });
  await db.query('CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT, n REAL CHECK (n >= 0), b BLOB, f INTEGER)');
  const ins = await db.query('INSERT INTO t (s, n, b, f) VALUES (?, ?, ?, ?)', ['tea', 2.5, { blob: '00ff' }, true]);
  assert.equal(ins.success, true);
  assert.equal(ins.meta.last_row_id, 1);
  const sel = await db.query('SELECT s, n, b, f FROM t WHERE id = ?', [1]);
  assert.deepEqual(sel.results, [{ s: 'tea', n: 2.5, b: { blob: '00ff' }, f: 1 }]);
  await assert.rejects(db.batch([{ sql: "INSERT INTO t (s, n) VALUES ('x', 1)" }, { sql: "INSERT INTO t (s, n) VALUES ('y', -1)" }]),
    (e) => e instanceof RetainerError && e.code === 'BAD_REQUEST' && /^SQL_ERROR: .*CHECK/.test(e.message));
  const [count] = await db.batch([{ sql: 'SELECT count(*) AS c FROM t' }]);
  assert.deepEqual(count.results, [{ c: 1 }]);
  const other = new RetainerSQL({ api: gw.api, token: token('sql-other') });
  await assert.rejects(other.query('SELECT * FROM t'), (e) => e instanceof RetainerError && /no such table/.test(e.message));
  const file = new Uint8Array(await db.export());
  assert.equal(new TextDecoder().decode(file.subarray(0, 15)), 'SQLite format 3');
});
