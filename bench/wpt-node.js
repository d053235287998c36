// Runs the WPT programs that sandbox/wpt_any_test.go dumped, in Node, and
// prints a markdown table of passed/total per area for the isolate (from
// isolate.json) and for Node. Usage: node bench/wpt-node.js <dump dir>
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const dir = process.argv[2];
const isolate = JSON.parse(fs.readFileSync(path.join(dir, 'isolate.json'), 'utf8'));
const area = (f) => { const p = f.split('/'); return p[0] === 'fetch' ? p.slice(0, 3).join('/') : p.slice(0, 2).join('/').replace(/\.any\.js$/, ''); };
// Subtests the expectations file says cannot run outside a browser and the
// WPT server (its reason for their file starts with one of these).
const envReasons = ['needs the WPT server', 'does not run here', 'needs a document'];
const env = new Set();
{
  let envFile = false;
  for (const line of fs.readFileSync(path.join(__dirname, '../sandbox/testdata/wpt-expectations.txt'), 'utf8').split('\n')) {
    const m = /^## (\S+): (.*)$/.exec(line);
    if (m) { envFile = envReasons.some((r) => m[2].startsWith(r)); continue; }
    if (!envFile || line.startsWith('#') || !line.includes('\t')) continue;
    const [file, name] = line.split('\t');
    env.add(file + '\t' + JSON.parse(name));
  }
}
const rows = {};
for (const file of Object.keys(isolate).sort()) {
  const a = area(file).startsWith('encoding/') ? 'encoding' : area(file).startsWith('compression/') ? 'compression' : area(file);
  rows[a] = rows[a] || { files: 0, iso: [0, 0], node: [0, 0], env: 0 };
  const r = rows[a];
  r.files++;
  const mine = isolate[file] || {};
  let nodePassed = {};
  const program = fs.readFileSync(path.join(dir, file.replace(/\//g, '__')), 'utf8');
  const runner = path.join(dir, 'run.js');
    // fs.writeSync: process.exit after an asynchronous write to a pipe
  // would cut a large answer short.
  fs.writeFileSync(runner, 'globalThis.self = globalThis;\nconst __fs = require("fs");\n(' + program + ')().then(r => { const o = {}; for (const [n, s] of r.results) o[n] = s === 0; if (r.harness.status !== 0) o["(harness)"] = false; __fs.writeSync(1, JSON.stringify(o)); process.exit(0); }, e => { __fs.writeSync(1, JSON.stringify({"(file)": false})); process.exit(0); });\n');
  try {
    nodePassed = JSON.parse(execFileSync(process.execPath, [runner], { timeout: 300000, maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'ignore'] }).toString() || '{}');
  } catch (e) {
    nodePassed = { '(file)': false };
  }
  // The union of subtest names: a subtest one side never ran counts as
  // failed there.
  const names = new Set([...Object.keys(mine), ...Object.keys(nodePassed)]);
  for (const n of names) {
    r.iso[1]++; r.node[1]++;
    if (env.has(file + '\t' + n)) r.env++;
    if (mine[n]) r.iso[0]++;
    if (nodePassed[n]) r.node[0]++;
  }
}
const pct = (x, y) => (y ? (100 * x / y).toFixed(1) : '100.0') + '%';
console.log('| area | files | Retainer | Node ' + process.versions.node + ' | need a browser or the WPT server | Retainer, of the rest |');
console.log('| --- | --- | --- | --- | --- | --- |');
for (const [a, r] of Object.entries(rows)) {
  console.log(`| ${a} | ${r.files} | ${r.iso[0]}/${r.iso[1]} (${pct(r.iso[0], r.iso[1])}) | ${r.node[0]}/${r.node[1]} | ${r.env} | ${r.iso[0]}/${r.iso[1] - r.env} (${pct(r.iso[0], r.iso[1] - r.env)}) |`);
}
