  // ------------------------------------------------------------ streamed responses
  // The host's buffer holds a window of bytes; past it streamWrite answers
  // false and the pump waits for streamDrained (a read made room) or
  // cancelStream (the visitor went away, or a bound ended the stream).
  const hostStreamOpen = coldHost('streamOpen');
  const hostStreamEnd = coldHost('streamEnd');
  let nextStream = 1;
  const pumping = new MapCtor(); // id -> {reader, resume}
  // pumpStream writes what reader yields to stream id: Uint8Array chunks,
  // or Latin-1 strings when latin1 (a body the runtime already holds).
  async function pumpStream(id, reader, latin1) {
    const state = { reader, resume: null, cancelled: false };
    pumping.set(id, state);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (state.cancelled) return;
        if (done) break;
        if (!latin1 && !(value instanceof Uint8ArrayCtor)) throw new TypeErrorCtor('A body stream must yield Uint8Array chunks.');
        if (!host.streamWrite(id, latin1 ? value : latin1FromBytes(value))) {
          await new PromiseCtor((resolve) => { state.resume = resolve; });
          if (state.cancelled) return;
        }
      }
      hostStreamEnd(id, '');
    } catch (e) {
      if (!state.cancelled) hostStreamEnd(id, inspect(e, 0, new SetCtor()) || 'error');
    } finally {
      pumping.delete(id);
    }
  }
  // A body over bigBody bytes leaves as a stream, a window at a time, at
  // the reader's pace: the gateway never holds a large answer whole for a
  // visitor who reads slowly, or for each of many (docs/architecture.md,
  // "Budgets"); the isolate holds it, within its own memory bound.
  const bigBody = 1 << 20;
  function streamLatin1(res, latin1) {
    const id = nextStream++;
    hostStreamOpen(id);
    let at = 0;
    const chunks = { read() {
      if (at >= latin1.length) return promiseResolve({ done: true, value: undefined });
      const part = strSlice.call(latin1, at, at + (64 << 10));
      at += part.length;
      return promiseResolve({ done: false, value: part });
    }, cancel() { at = latin1.length; return promiseResolve(); } };
    pumpStream(id, chunks, true);
    return wireHead(res, '1', id, '', res.headers.has('content-length') ? undefined : latin1.length);
  }
  function streamDrained(id) {
    const st = pumping.get(id);
    if (st && st.socket) { flushSocket(st.socket); return; }
    if (st && st.resume) { const r = st.resume; st.resume = null; r(); }
  }
  function cancelStream(id) {
    const st = pumping.get(id);
    if (!st) return;
    if (st.socket) {
      // The gateway let the socket go: it is closed, and its close event
      // fires if none did (24-websocket.js).
      pumping.delete(id);
      socketLetGo(id, st.socket);
      return;
    }
    st.cancelled = true;
    pumping.delete(id);
    if (st.resume) { const r = st.resume; st.resume = null; r(); }
    try {
      promiseThen.call(promiseResolve(st.reader.cancel(new TypeErrorCtor('The response stream was cancelled: the visitor went away or a bound ended it.'))), undefined, reportError);
    } catch (e) { reportError(e); }
  }


