/**
 * The host side of Retainer's executor socket (docs/protocol.md).
 *
 * A `RetainerExecutor` runs programs on a Retainer gateway; the tools a
 * program calls run here, in the caller's process, answered over the
 * socket. It implements `@cloudflare/codemode`'s `Executor`, so codemode's
 * `createCodeTool({ tools, executor })` runs model-written code on Retainer.
 */

/** The protocol and version this client speaks. */
export const SUBPROTOCOL = "retainer.executor.v1";

/** A tool the program may call; it runs in this process. */
export type ToolFn = (...args: unknown[]) => Promise<unknown> | unknown;

/** `@cloudflare/codemode`'s resolved provider: `name.<fn>` in the program. */
export interface ResolvedProvider {
  name: string;
  fns: Record<string, ToolFn>;
  /** Sandbox-side JavaScript of codemode's own providers: not supported (the program's provider objects are frozen). */
  prelude?: string;
}

/** A caller provider answered by the request's `dispatch` (seed 003's shape). */
export interface DispatchedProvider {
  name: string;
  tools: string[];
}

/** A provider declared in the gateway's Caddyfile (its tools are upstream URLs). */
export interface UpstreamProvider {
  name: string;
  tools: string[];
  upstream: true;
}

export type Provider = ResolvedProvider | DispatchedProvider | UpstreamProvider;

/** `@cloudflare/codemode`'s execute result. */
export interface ExecuteResult {
  result: unknown;
  error?: string;
  logs?: string[];
}

/** The body of POST /executions, with providers that may run here. */
export interface ExecuteRequest {
  code: string;
  modules?: Record<string, string>;
  providers?: Provider[];
  /** Answers the calls of `DispatchedProvider` tools. */
  dispatch?: (provider: string, tool: string, args: unknown[]) => Promise<unknown> | unknown;
  retainHandles?: boolean;
  concurrency?: number;
  timeoutMs?: number;
  memoryLimitMb?: number;
  capabilities?: string[];
  /** "typescript" for a program in TypeScript (the gateway strips its types); default JavaScript. */
  language?: "javascript" | "typescript";
  /** A retained handle's own idle bound in ms (1,000 up to the gateway's `max_idle`). */
  idleMs?: number;
  /** `headers`: set by the gateway on fetch to a host, naming the tenant's secrets ("Bearer {secret.API_KEY}"). */
  outbound?: { allow: string[]; headers?: Record<string, Record<string, string>> };
  env?: Record<string, string>;
}

/** A fault as the gateway answers it (the API's error codes (README.md, API)). */
export interface Fault {
  code: string;
  message: string;
  retryable: boolean;
}

/** The native outcome of a run: the answer of POST /executions, or its fault. */
export interface Outcome {
  result?: unknown;
  logs?: string[];
  executionId?: string;
  handles?: string[];
  resultId?: string;
  error?: Fault;
}

/** A request for a handle; `body` null is none. */
export interface WireRequest {
  method: string;
  url: string;
  headers?: [string, string][];
  body?: ArrayBuffer | Uint8Array | string | null;
}

/** A handle's answer. */
export interface WireResponse {
  status: number;
  statusText: string;
  headers: [string, string][];
  body: ArrayBuffer | null;
}

/** Thrown by `invokeHandle` and `closeHandles` for a fault or a lost connection. */
export class RetainerError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  constructor(fault: Fault) {
    super(fault.message);
    this.name = "RetainerError";
    this.code = fault.code;
    this.retryable = fault.retryable;
  }
}

export interface RetainerExecutorOptions {
  /** The executor socket: the API's address with `/executor` (ws:, wss:, http: or https:). */
  url: string;
  /** Bearer token of the tenant. Sent as a header where the platform allows, else as the query parameter `tokenQuery`. */
  token?: string;
  /** The query parameter `retainer_jwt` reads (its `query` option) when a header cannot be sent. Default `access_token`. */
  tokenQuery?: string;
}

// The socket as far as this client uses it: the browser's WebSocket and
// the `ws` package both have this shape.
interface Socket {
  readyState: number;
  protocol: string;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
}

type Pending = { resolve: (msg: Incoming) => void; reject: (err: Error) => void };

interface Incoming {
  type: string;
  id?: number;
  execution?: number;
  provider?: string;
  tool?: string;
  args?: unknown[];
  outcome?: Outcome;
  response?: { status: number; statusText: string; headers: [string, string][]; body: string | null };
  error?: Fault;
}

type Dispatch = (provider: string, tool: string, args: unknown[]) => Promise<unknown> | unknown;

/**
 * One connection to a gateway's executor socket, opened on first use and
 * again after it closes. Executions, invocations and tool calls overlap.
 */
export class RetainerExecutor {
  #opts: RetainerExecutorOptions;
  #socket: Promise<Socket> | null = null;
  #nextId = 0;
  #pending = new Map<number, Pending>();
  #dispatch = new Map<number, Dispatch>();

  constructor(opts: RetainerExecutorOptions) {
    if (!opts || typeof opts.url !== "string") throw new TypeError("RetainerExecutor needs { url }.");
    this.#opts = { ...opts };
  }

  /**
   * `@cloudflare/codemode`'s `Executor.execute`: runs `code` with the tools
   * as `codemode.<name>` (a record of functions) or `<name>.<fn>` (a list of
   * providers). Never throws: a failure is `{ result: undefined, error }`.
   */
  execute(code: string, providersOrFns?: ResolvedProvider[] | Record<string, ToolFn>, options?: unknown): Promise<ExecuteResult>;
  /** The native shape (seed 003): the gateway's outcome, a fault as `outcome.error`. Never throws. */
  execute(request: ExecuteRequest): Promise<Outcome>;
  async execute(
    codeOrRequest: string | ExecuteRequest,
    providersOrFns?: ResolvedProvider[] | Record<string, ToolFn>,
  ): Promise<ExecuteResult | Outcome> {
    if (typeof codeOrRequest !== "string") return this.#run(codeOrRequest);
    const providers: ResolvedProvider[] = Array.isArray(providersOrFns)
      ? providersOrFns
      : providersOrFns
        ? [{ name: "codemode", fns: providersOrFns }]
        : [];
    const outcome = await this.#run({ code: codeOrRequest, providers });
    if (outcome.error) {
      return outcome.logs?.length
        ? { result: undefined, error: `${outcome.error.code}: ${outcome.error.message}`, logs: outcome.logs }
        : { result: undefined, error: `${outcome.error.code}: ${outcome.error.message}` };
    }
    return outcome.logs?.length ? { result: outcome.result, logs: outcome.logs } : { result: outcome.result };
  }

  /** Sends a request to a retained handle of the token's tenant. */
  async invokeHandle(executionId: string, name: string, request: WireRequest): Promise<WireResponse> {
    const msg = await this.#roundTrip("invoke", {
      executionId,
      name,
      request: {
        method: request.method,
        url: request.url,
        headers: request.headers ?? [],
        body: request.body == null ? null : toBase64(request.body),
      },
    });
    if (msg.error) throw new RetainerError(msg.error);
    const r = msg.response!;
    return { status: r.status, statusText: r.statusText, headers: r.headers, body: r.body == null ? null : fromBase64(r.body) };
  }

  /** Closes a retained handle. */
  async closeHandles(executionId: string): Promise<void> {
    const msg = await this.#roundTrip("close", { executionId });
    if (msg.error) throw new RetainerError(msg.error);
  }

  /** Closes the connection. Runs already started go on on the gateway; their caller tools throw from now on. */
  close(): void {
    const s = this.#socket;
    this.#socket = null;
    s?.then((ws) => ws.close(1000, "closed by the host"), () => {});
  }

  async #run(req: ExecuteRequest): Promise<Outcome> {
    try {
      const fns = new Map<string, Record<string, ToolFn>>();
      const wire: { name: string; tools: string[]; caller?: true }[] = [];
      for (const p of req.providers ?? []) {
        if ("upstream" in p && p.upstream) {
          wire.push({ name: p.name, tools: p.tools });
        } else if ("fns" in p) {
          if (p.prelude) throw new Error(`The provider ${p.name} has a prelude: sandbox-side JavaScript is not supported by Retainer.`);
          fns.set(p.name, p.fns);
          wire.push({ name: p.name, tools: Object.keys(p.fns), caller: true });
        } else {
          wire.push({ name: p.name, tools: p.tools, caller: true });
        }
      }
      const dispatch: Dispatch = async (provider, tool, args) => {
        const own = fns.get(provider);
        if (own) {
          const fn = own[tool];
          if (typeof fn !== "function") throw new Error(`The host has no tool ${provider}.${tool}.`);
          return fn(...args);
        }
        if (!req.dispatch) throw new Error(`The host has no dispatch for ${provider}.${tool}.`);
        return req.dispatch(provider, tool, args);
      };
      const { dispatch: _d, providers: _p, ...rest } = req;
      const body: Record<string, unknown> = { ...rest };
      if (wire.length) body.providers = wire;
      const msg = await this.#roundTrip("execute", { request: body }, dispatch);
      return msg.outcome ?? { error: { code: "BAD_RESPONSE", message: "The gateway answered no outcome.", retryable: false } };
    } catch (e) {
      if (e instanceof RetainerError) return { error: { code: e.code, message: e.message, retryable: e.retryable } };
      return { error: { code: "CONNECTION", message: e instanceof Error ? e.message : String(e), retryable: true } };
    }
  }

  async #roundTrip(type: string, fields: Record<string, unknown>, dispatch?: Dispatch): Promise<Incoming> {
    const ws = await this.#connect();
    const id = ++this.#nextId;
    if (dispatch) this.#dispatch.set(id, dispatch);
    try {
      return await new Promise<Incoming>((resolve, reject) => {
        this.#pending.set(id, { resolve, reject });
        // type and id first: a gateway answers a message over its size
        // bound by reading them from its start.
        ws.send(JSON.stringify({ type, id, ...fields }));
      });
    } finally {
      this.#pending.delete(id);
      this.#dispatch.delete(id);
    }
  }

  #connect(): Promise<Socket> {
    if (this.#socket) return this.#socket;
    const opened = openSocket(this.#opts).then((ws) => {
      ws.onmessage = (ev) => this.#receive(ws, ev.data);
      ws.onclose = (ev) => {
        if (this.#socket === opened) this.#socket = null;
        const err = new RetainerError({
          code: "CONNECTION",
          message: `The connection to the gateway closed${ev?.reason ? `: ${ev.reason}` : ""}.`,
          retryable: true,
        });
        for (const p of this.#pending.values()) p.reject(err);
        this.#pending.clear();
      };
      return ws;
    });
    opened.catch(() => {
      if (this.#socket === opened) this.#socket = null;
    });
    this.#socket = opened;
    return opened;
  }

  #receive(ws: Socket, data: unknown): void {
    let msg: Incoming;
    try {
      msg = JSON.parse(typeof data === "string" ? data : new TextDecoder().decode(data as ArrayBuffer));
    } catch {
      return;
    }
    if (msg.type === "call") {
      void this.#serveCall(ws, msg);
      return;
    }
    const p = msg.id === undefined ? undefined : this.#pending.get(msg.id);
    if (!p) return;
    if (msg.type === "fault" && msg.error) p.reject(new RetainerError(msg.error));
    else p.resolve(msg);
  }

  async #serveCall(ws: Socket, msg: Incoming): Promise<void> {
    let answer: Record<string, unknown>;
    try {
      const dispatch = this.#dispatch.get(msg.execution!);
      if (!dispatch) throw new Error(`No execution of this host calls ${msg.provider}.${msg.tool}.`);
      const value = await dispatch(msg.provider!, msg.tool!, msg.args ?? []);
      const json = JSON.stringify(value === undefined ? null : value);
      answer = { type: "result", id: msg.id, value: JSON.parse(json) };
    } catch (e) {
      answer = { type: "error", id: msg.id, message: e instanceof Error ? e.message : String(e) };
    }
    if (ws.readyState === 1) ws.send(JSON.stringify(answer));
  }
}

// openSocket opens the WebSocket: the `ws` package on Node (it sends the
// token as a header), the platform's WebSocket elsewhere (the token in the
// query, as browsers cannot set headers on a WebSocket).
/** A value of a statement: a BLOB is `{ blob: "<hex>" }` (as POST /sql answers one). */
export type SQLValue = null | number | string | boolean | { blob: string };

/** One statement and its values. */
export interface SQLStatement {
  sql: string;
  params?: SQLValue[];
}

/** D1's `.all()` shape, as POST /sql answers it. */
export interface SQLResult {
  success: true;
  meta: {
    duration: number;
    changes: number;
    last_row_id: number;
    changed_db: boolean;
    rows_read: number;
    rows_written: number;
    size_after: number;
  };
  results: Record<string, SQLValue>[];
}

export interface RetainerSQLOptions {
  /** The API's address (the executor socket's, without `/executor`): `https://api.example.com`. */
  api: string;
  /** Bearer token of the tenant. */
  token?: string;
}

/**
 * The tenant's SQL database through the control plane (docs/sql.md):
 * `POST /sql` and `GET /sql/export`, as the token's tenant. A fault
 * throws a `RetainerError` (`SQL_ERROR: ...` is code `BAD_REQUEST`).
 */
export class RetainerSQL {
  #opts: RetainerSQLOptions;

  constructor(opts: RetainerSQLOptions) {
    if (!opts || typeof opts.api !== "string") throw new TypeError("RetainerSQL needs { api }.");
    this.#opts = { ...opts, api: opts.api.replace(/\/+$/, "") };
  }

  /** Runs one statement. */
  async query(sql: string, params?: SQLValue[]): Promise<SQLResult> {
    return (await this.#fetch("POST", "/sql", params ? { sql, params } : { sql }).then((r) => r.json())) as SQLResult;
  }

  /** Runs statements in one transaction: all of them, or (it throws) none. */
  async batch(statements: SQLStatement[]): Promise<SQLResult[]> {
    return (await this.#fetch("POST", "/sql", { batch: statements }).then((r) => r.json())) as SQLResult[];
  }

  /** The database as a SQLite file (a consistent copy). */
  async export(): Promise<ArrayBuffer> {
    return (await this.#fetch("GET", "/sql/export")).arrayBuffer();
  }

  async #fetch(method: string, path: string, body?: unknown): Promise<Response> {
    return this.send(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? {} : { "content-type": "application/json" });
  }

  /** @internal A control-plane request as the token's tenant; a fault throws. */
  async send(method: string, path: string, body?: RequestInit["body"], extra: Record<string, string> = {}): Promise<Response> {
    const headers: Record<string, string> = { ...extra };
    if (this.#opts.token) headers.authorization = `Bearer ${this.#opts.token}`;
    const res = await fetch(this.#opts.api + path, { method, headers, body });
    if (res.ok) return res;
    const text = await res.text();
    try {
      const env = JSON.parse(text) as { error?: Fault };
      if (env.error) throw new RetainerError(env.error);
    } catch (e) {
      if (e instanceof RetainerError) throw e;
    }
    throw new RetainerError({ code: "CONNECTION", message: `${method} ${path} answered HTTP ${res.status}.`, retryable: res.status >= 500 });
  }
}

/** An object as the control plane lists it. */
export interface ObjectInfo {
  key: string;
  size: number;
  etag: string;
  uploaded?: string;
}

/** One page of a listing; `cursor` asks for the next when `truncated`. */
export interface ObjectPage {
  objects: ObjectInfo[];
  truncated: boolean;
  cursor?: string;
}

/**
 * The tenant's bucket through the control plane (docs/objects.md):
 * `GET /objects`, and `GET`, `PUT`, `DELETE /objects/{key}`, as the token's
 * tenant. A fault throws a `RetainerError`.
 */
export class RetainerObjects {
  #sql: RetainerSQL;

  constructor(opts: RetainerSQLOptions) {
    this.#sql = new RetainerSQL(opts);
  }

  /** Stores `body` under `key` (up to the gateway's `max_object`); a put that fails leaves the old object. */
  async put(key: string, body: string | ArrayBuffer | Uint8Array | Blob): Promise<ObjectInfo> {
    // A Uint8Array is a fetch body at run time; TypeScript's BodyInit wants its buffer an ArrayBuffer.
    return (await this.#sql.send("PUT", objectPath(key), body as RequestInit["body"]).then((r) => r.json())) as ObjectInfo;
  }

  /** The object's bytes, or `length` bytes from `offset` (a range); a missing key throws `NOT_FOUND`. */
  async get(key: string, range?: { offset: number; length?: number }): Promise<ArrayBuffer> {
    const headers: Record<string, string> = {};
    if (range) headers.range = `bytes=${range.offset}-${range.length === undefined ? "" : range.offset + range.length - 1}`;
    return (await this.#sql.send("GET", objectPath(key), undefined, headers)).arrayBuffer();
  }

  /** A page of the keys under `prefix` in byte order, from `cursor`. */
  async list(prefix = "", cursor?: string): Promise<ObjectPage> {
    const q = new URLSearchParams({ prefix });
    if (cursor) q.set("cursor", cursor);
    return (await this.#sql.send("GET", `/objects?${q}`).then((r) => r.json())) as ObjectPage;
  }

  /** Removes the object under `key` (none there is no error). */
  async delete(key: string): Promise<void> {
    await this.#sql.send("DELETE", objectPath(key));
  }
}

// A key's path: each segment escaped, its slashes kept.
function objectPath(key: string): string {
  return "/objects/" + key.split("/").map(encodeURIComponent).join("/");
}

async function openSocket(opts: RetainerExecutorOptions): Promise<Socket> {
  let url = opts.url.replace(/^http(s?):/, "ws$1:");
  let ws: Socket;
  const isNode = typeof process !== "undefined" && !!process.versions?.node;
  if (isNode) {
    const { default: WS } = await import("ws");
    const headers: Record<string, string> = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
    ws = new WS(url, SUBPROTOCOL, { headers }) as unknown as Socket;
  } else {
    if (opts.token) {
      const u = new URL(url);
      u.searchParams.set(opts.tokenQuery ?? "access_token", opts.token);
      url = u.href;
    }
    ws = new (globalThis as unknown as { WebSocket: new (url: string, protocols: string) => Socket }).WebSocket(url, SUBPROTOCOL);
  }
  return new Promise<Socket>((resolve, reject) => {
    let unexpected: string | undefined;
    // `ws` reports a refused upgrade (401, 400) with its status.
    (ws as unknown as { on?: (ev: string, fn: (...a: unknown[]) => void) => void }).on?.("unexpected-response", (_req: unknown, res: unknown) => {
      const r = res as { statusCode?: number; on: (ev: string, fn: (c?: unknown) => void) => void };
      let body = "";
      r.on("data", (c) => (body += String(c)));
      r.on("end", () => {
        try {
          const env = JSON.parse(body) as { error?: Fault };
          if (env.error) return reject(new RetainerError(env.error));
        } catch {
          /* not the gateway's envelope */
        }
        reject(new RetainerError({ code: "CONNECTION", message: `The gateway refused the socket (HTTP ${r.statusCode}).`, retryable: false }));
      });
      unexpected = "refused";
    });
    ws.onopen = () => {
      if (ws.protocol !== SUBPROTOCOL) {
        ws.close(1002, "subprotocol not accepted");
        reject(new RetainerError({ code: "CONNECTION", message: `The gateway did not accept ${SUBPROTOCOL}.`, retryable: false }));
        return;
      }
      resolve(ws);
    };
    ws.onerror = () => {
      if (!unexpected) reject(new RetainerError({ code: "CONNECTION", message: `Could not connect to ${opts.url}.`, retryable: true }));
    };
  });
}

function toBase64(body: ArrayBuffer | Uint8Array | string): string {
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body instanceof Uint8Array ? body : new Uint8Array(body);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(b64: string): ArrayBuffer {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out.buffer;
}
