let served = 0;
export default { fetch() { return Response.json({served: ++served}) } }
