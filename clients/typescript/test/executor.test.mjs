// The client against a real gateway built from this checkout: used the way
// @cloudflare/codemode uses an Executor, and in seed 003's native shapes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createCodeTool } from '@cloudflare/codemode/ai';
import { tool } from 'ai';
import { z } from 'zod';
import { RetainerExecutor } from '../dist/index.js';
import { startGateway, token } from './gateway.mjs';

let gw;
before(async () => { gw = await startGateway(); });
after(async () => { await gw?.stop(); });

test('codemode createCodeTool runs model code on Retainer; the tools run here', async () => {
  const executor = new RetainerExecutor({ url: gw.url, token: token('codemode-tenant') });
  const seen = [];
  const tools = {
    getWeather: tool({
      description: 'Weather of a city',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => { seen.push(city); return { city, celsius: city.length }; },
    }),
  };
  const codeTool = createCodeTool({ tools, executor });
  const out = await codeTool.execute({
    code: `async () => {
      const a = await codemode.getWeather({ city: "Paris" });
      const b = await codemode.getWeather({ city: "Lisbon" });
      console.log("asked twice");
      return a.celsius + b.celsius;
    }`,
  }, { toolCallId: 't1', messages: [] });
  assert.deepEqual(out, { result: 11, logs: ['asked twice'] });
  assert.deepEqual(seen, ['Paris', 'Lisbon']);
  executor.close();
});

test('Executor.execute: a record is codemode.*, providers are name.*, errors reach the program, never throws', async () => {
  const executor = new RetainerExecutor({ url: gw.url, token: token('executor-tenant') });
  const record = await executor.execute('async () => codemode.add(2, 3)', { add: async (a, b) => a + b });
  assert.deepEqual(record, { result: 5 });

  const providers = await executor.execute(`async () => {
    const items = await shop.list({ max: 2 });
    let thrown;
    try { await shop.fail(); } catch (e) { thrown = e.message; }
    return { items, thrown };
  }`, [{ name: 'shop', fns: { list: async ({ max }) => ['tea', 'coffee', 'cocoa'].slice(0, max), fail: async () => { throw new Error('out of stock'); } } }]);
  assert.deepEqual(providers.result.items, ['tea', 'coffee']);
  assert.match(providers.result.thrown, /out of stock/);

  const syntax = await executor.execute('async () => {', {});
  assert.equal(syntax.result, undefined);
  assert.match(syntax.error, /^SYNTAX: /);

  const threw = await executor.execute('async () => { throw new Error("nope") }', {});
  assert.match(threw.error, /^RUNTIME: .*nope/);

  const overlapping = await executor.execute('async () => (await Promise.all([1,2,3,4,5,6,7,8,9,10].map(n => codemode.slow(n)))).join(",")',
    { slow: (n) => new Promise((r) => setTimeout(() => r(n * 10), 100 - n * 5)) });
  assert.equal(overlapping.result, '10,20,30,40,50,60,70,80,90,100');

  const nowhere = new RetainerExecutor({ url: 'ws://127.0.0.1:1/executor', token: 'x' });
  const lost = await nowhere.execute('async () => 1', {});
  assert.equal(lost.result, undefined);
  assert.match(lost.error, /CONNECTION/);

  const unauthorized = new RetainerExecutor({ url: gw.url, token: 'not-a-token' });
  const refused = await unauthorized.execute('async () => 1', {});
  assert.match(refused.error, /^UNAUTHENTICATED: /);
  executor.close();
});

test('native shapes: execute with retainHandles, invokeHandle with bytes, closeHandles, dispatch', async () => {
  const executor = new RetainerExecutor({ url: gw.url, token: token('native-tenant') });
  const calls = [];
  const outcome = await executor.execute({
    code: `async () => {
      const greeting = await host.greeting("world");
      return { async fetch(request) {
        const body = new Uint8Array(await request.arrayBuffer());
        return new Response(new Uint8Array([...body].reverse()), { headers: { "x-greeting": greeting } });
      } };
    }`,
    providers: [{ name: 'host', tools: ['greeting'] }],
    dispatch: async (provider, name, args) => { calls.push([provider, name, args]); return `hello, ${args[0]}`; },
    retainHandles: true,
  });
  assert.equal(outcome.error, undefined, JSON.stringify(outcome.error));
  assert.ok(outcome.executionId);
  assert.deepEqual(outcome.handles, ['fetch']);
  assert.ok(outcome.resultId);
  assert.deepEqual(calls, [['host', 'greeting', ['world']]]);
  executor.close();

  // Another connection invokes it: handles are keyed on the gateway.
  const other = new RetainerExecutor({ url: gw.url, token: token('native-tenant') });
  const bytes = new Uint8Array([0, 1, 2, 250, 255]).buffer;
  const res = await other.invokeHandle(outcome.executionId, 'fetch', { method: 'POST', url: 'https://app.example/x', headers: [['content-type', 'application/octet-stream']], body: bytes });
  assert.equal(res.status, 200);
  assert.deepEqual([...new Uint8Array(res.body)], [255, 250, 2, 1, 0]);
  assert.ok(res.headers.some(([k, v]) => k === 'x-greeting' && v === 'hello, world'));

  // And over HTTP.
  const http = await fetch(`${gw.api}/handles/${outcome.executionId}/fetch`, {
    method: 'POST', headers: { authorization: `Bearer ${token('native-tenant')}` },
    body: JSON.stringify({ method: 'POST', url: 'https://app.example/', headers: [], body: Buffer.from('abc').toString('base64') }),
  });
  assert.equal(Buffer.from((await http.json()).body, 'base64').toString(), 'cba');

  // Another tenant cannot see it.
  const stranger = new RetainerExecutor({ url: gw.url, token: token('stranger') });
  await assert.rejects(stranger.invokeHandle(outcome.executionId, 'fetch', { method: 'GET', url: 'https://x/' }), { code: 'HANDLES_CLOSED' });
  stranger.close();

  await other.closeHandles(outcome.executionId);
  await assert.rejects(other.invokeHandle(outcome.executionId, 'fetch', { method: 'GET', url: 'https://x/' }), { code: 'HANDLES_CLOSED' });
  await assert.rejects(other.closeHandles(outcome.executionId), { code: 'HANDLES_CLOSED' });
  other.close();
});

test('a fault of the gateway is the native outcome\'s error, with the receipt id', async () => {
  const executor = new RetainerExecutor({ url: gw.url, token: token('fault-tenant') });
  const outcome = await executor.execute({ code: 'async () => { while (true) {} }', timeoutMs: 100 });
  assert.equal(outcome.error.code, 'TIMEOUT');
  assert.ok(outcome.resultId);
  const bad = await executor.execute({ code: 'async () => 1', capabilities: ['teleport'] });
  assert.equal(bad.error.code, 'BAD_REQUEST');
  executor.close();
});
