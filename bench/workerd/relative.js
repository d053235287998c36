let served = 0;
export default { fetch(request) { const next = new URL("/items?page=" + (++served % 10), request.url); return Response.json({ next: next.href, served }) } }
