// @cloudflare/codemode's entry points import `cloudflare:workers` (for its
// Durable Object connectors, which these tests do not use). On Node that
// module does not exist; this stands in for the three classes it names.
export class DurableObject { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }
export class WorkerEntrypoint { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }
export class RpcTarget {}
