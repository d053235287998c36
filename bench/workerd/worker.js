let served = 0;
export default { fetch(request) { const id = new URL(request.url).searchParams.get("id"); return Response.json({id, served: ++served}) } }
