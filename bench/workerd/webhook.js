// A webhook receiver: checks the body's HMAC-SHA256 (hex, in a header)
// and answers what it parsed.
const enc = new TextEncoder();
let key;
export default {
	async fetch(request) {
		key ??= await crypto.subtle.importKey("raw", enc.encode("webhook-secret"), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
		const body = await request.text();
		const sig = request.headers.get("x-signature") || "";
		const mac = new Uint8Array(sig.length / 2);
		for (let i = 0; i < mac.length; i++) mac[i] = parseInt(sig.substr(i * 2, 2), 16);
		if (!(await crypto.subtle.verify("HMAC", key, mac, enc.encode(body)))) return new Response("bad signature", { status: 401 });
		const event = JSON.parse(body);
		return Response.json({ ok: true, id: event.id, items: event.items.length });
	}
}
