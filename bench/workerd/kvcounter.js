// A counter in Durable Object storage (bench/kv.sh): the workerd side of
// the kv read-modify-write counter. ?n= names the object (one counter per
// name); each object's storage is its own.
export class Counter {
	constructor(state) { this.storage = state.storage }
	async fetch() {
		const n = ((await this.storage.get("c")) || 0) + 1
		await this.storage.put("c", n)
		return Response.json({n})
	}
}
export default {
	fetch(request, env) {
		const name = new URL(request.url).searchParams.get("n") || "c"
		return env.COUNTER.get(env.COUNTER.idFromName(name)).fetch(request)
	}
}
