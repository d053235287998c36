  // ------------------------------------------------------------ crypto
  function randomBytes(n) {
    const s = host.random(n); // n bytes as a Latin-1 string
    const b = new Uint8ArrayCtor(n);
    for (let i = 0; i < n; i++) b[i] = s.charCodeAt(i);
    return b;
  }
  const cryptoObj = {};
  hidden(cryptoObj, 'getRandomValues', function getRandomValues(view) {
    if (!ArrayBuffer.isView(view) || view instanceof Float32Array || view instanceof Float64Array || view instanceof DataView) {
      throw domException('The data must be an integer typed array.', 'TypeMismatchError');
    }
    if (view.byteLength > 65536) throw domException('The ArrayBufferView\'s byte length exceeds 65536.', 'QuotaExceededError');
    new Uint8ArrayCtor(view.buffer, view.byteOffset, view.byteLength).set(randomBytes(view.byteLength));
    return view;
  });
  // A version 4 UUID, made by the host (host.random's -1).
  hidden(cryptoObj, 'randomUUID', function randomUUID() { return host.random(-1); });
  hidden(G, 'crypto', cryptoObj);

