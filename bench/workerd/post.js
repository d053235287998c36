// An API that reads a JSON body (a cart of items), totals it and answers
// JSON.
export default {
  async fetch(request) {
    const items = await request.json();
    let total = 0;
    for (const it of items) total += it.price;
    return Response.json({ count: items.length, total });
  },
};
