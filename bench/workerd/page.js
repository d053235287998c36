// A page rendered on every request: 100 rows of a product table (~6 KB of
// HTML) from data held by the module, the visitor's ?q= echoed escaped.
const items = Array.from({ length: 100 }, (_, i) => ({ id: i, name: `item number ${i}`, price: ((i * 7) % 100) + 0.99 }));
const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
export default {
  fetch(request) {
    const q = new URL(request.url).searchParams.get("q") || "";
    const rows = items.map((it) => `<tr><td>${it.id}</td><td>${it.name}</td><td>${it.price.toFixed(2)}</td></tr>`).join("\n");
    const html = `<!doctype html><html><head><title>Shop</title></head><body><h1>Results for ${esc(q)}</h1><table>\n${rows}\n</table></body></html>\n`;
    return new Response(html, { headers: { "content-type": "text/html; charset=utf-8" } });
  },
};
