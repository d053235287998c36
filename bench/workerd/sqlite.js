// bench/sql.sh's anchor: the primary-key SELECT and the one-INSERT handlers
// on Deno with node:sqlite, in WAL mode with synchronous=FULL as Retainer's
// databases (docs/sql.md). The file is SQL_BENCH_DB.
import { DatabaseSync } from 'node:sqlite';
const db = new DatabaseSync(Deno.env.get('SQL_BENCH_DB'));
db.exec(`PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
  CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT, price REAL);
  CREATE TABLE IF NOT EXISTS hits (id INTEGER PRIMARY KEY, at INTEGER);`);
if (db.prepare('SELECT count(*) AS n FROM items').get().n === 0) {
  db.exec(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) INSERT INTO items SELECT x, 'item ' || x, x * 1.5 FROM c`);
}
const select = db.prepare('SELECT * FROM items WHERE id = ?');
const insert = db.prepare('INSERT INTO hits (at) VALUES (?)');
let n = 0;
export default {
  fetch(req) {
    if (new URL(req.url).pathname === '/insert') return Response.json({ id: Number(insert.run(Date.now()).lastInsertRowid) });
    n = n % 1000 + 1;
    return Response.json({ ...select.get(n) });
  },
};
