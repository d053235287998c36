// Starts a real Retainer gateway built from this checkout for the tests:
// `go build ./cmd/retainer` (or RETAINER_BIN), a Caddyfile on a free port,
// HS256 tokens minted here.
import { spawn, execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

const root = resolve(fileURLToPath(import.meta.url), '../../../..');
const secret = 'typescript-client-test-secret-0123456789';

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
    s.on('error', rej);
  });
}

export function token(tenant) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = b64({ alg: 'HS256', typ: 'JWT' });
  const body = b64({ sub: tenant, aud: 'retainer', exp: Math.floor(Date.now() / 1000) + 3600 });
  const sig = createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

export async function startGateway() {
  const dir = mkdtempSync(join(tmpdir(), 'retainer-ts-'));
  let bin = process.env.RETAINER_BIN;
  if (!bin) {
    bin = join(dir, 'retainer');
    execFileSync('go', ['build', '-o', bin, './cmd/retainer'], { cwd: root, stdio: 'inherit', env: { ...process.env, CGO_ENABLED: '1' } });
  }
  const port = await freePort();
  const caddyfile = join(dir, 'Caddyfile');
  writeFileSync(caddyfile, `{
	admin off
	retainer {
		store ${join(dir, 'registry.db')}
		workers auto
		timeout 5s
	}
}

http://127.0.0.1:${port} {
	retainer_jwt {
		secret ${secret}
		audience retainer
	}
	retainer_api
}
`);
  const proc = spawn(bin, ['run', '--config', caddyfile], { env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (c) => { log += c; });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(`${base}/health`, { headers: { authorization: `Bearer ${token('health')}` } });
      if (r.ok) break;
    } catch { /* not up yet */ }
    if (i > 300 || proc.exitCode !== null) throw new Error(`the gateway did not start:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `ws://127.0.0.1:${port}/executor`,
    api: base,
    log: () => log,
    async stop() {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
