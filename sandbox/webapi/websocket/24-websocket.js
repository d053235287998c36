  // ------------------------------------------------------------ WebSocket
  // WebSocketPair and WebSocket as in Workers (docs/websockets.md). The
  // handler's end of an accepted socket writes what it sends as records on
  // a response stream (a kind byte, a 4-byte length, the payload), so the
  // gateway's output gate and the stream's flow control hold for them too;
  // the visitor's messages and close come back as socket events. Sends
  // beyond the stream's window wait here, all the isolate's sockets
  // together up to its share (host socketQueueBound: a quarter of its
  // memory bound, at most 8 MiB): past it the socket whose visitor has
  // read nothing for the longest (the most waiting among those) is closed
  // with 1008, until what waits is within the share again, so visitors who
  // do not read never make the isolate hit its memory bound, and those who
  // read keep their sockets (docs/websockets.md).
  // Every accepted socket gets exactly one close event, whatever ends it
  // (the visitor's close, the gateway's for a bound, a refused upgrade,
  // the gateway letting the stream go): the socket's stream stays open
  // until the gateway lets it go, and its cancel fires the close event
  // when nothing else did.
  // A waiting send costs its record's bytes and recordCost more (its slot
  // and string head), so many small sends are bounded as well as big ones.
  const recordCost = 32;
  let queueBound = -1; // the isolate's share, asked for once
  let queuedAll = 0; // bytes waiting, all sockets
  let progressTick = 0; // orders the sockets' last progress
  const queuing = new SetCtor(); // the states of sockets with sends waiting
  // maxPending bounds the visitor's messages that wait for accept(): past
  // it they are dropped and the socket closes with 1008.
  const maxPending = 1 << 20;
  const socketState = new WeakMap(); // WebSocket -> its state
  const socketsByStream = new MapCtor(); // stream id -> the handler's WebSocket
  let makingSocket = false;
  function isClientSocket(ws) { const st = socketState.get(ws); return st !== undefined && st.client; }
  function u32(n) { return fromCharCode((n >>> 24) & 255, (n >>> 16) & 255, (n >>> 8) & 255, n & 255); }
  function socketRecord(kind, latin1) { return kind + u32(latin1.length) + latin1; }
  class MessageEvent extends Event {
    #data;
    constructor(type, init = undefined) { super(type, init); init = eventInit(init); this.#data = init.data === undefined ? null : init.data; }
    get data() { return this.#data; }
  }
  hidden(G, 'MessageEvent', MessageEvent);
  class CloseEvent extends Event {
    #code; #reason; #wasClean;
    constructor(type, init = undefined) {
      super(type, init); init = eventInit(init);
      this.#code = init.code === undefined ? 0 : +init.code; this.#reason = init.reason === undefined ? '' : StringCtor(init.reason); this.#wasClean = !!init.wasClean;
    }
    get code() { return this.#code; }
    get reason() { return this.#reason; }
    get wasClean() { return this.#wasClean; }
  }
  hidden(G, 'CloseEvent', CloseEvent);
  class WebSocket extends EventTarget {
    constructor(url) {
      if (!makingSocket) throw new TypeErrorCtor('Outbound WebSockets are not supported here; a handler accepts them with WebSocketPair.');
      super();
      socketState.set(this, { client: false, peer: null, accepted: false, readyState: 0, stream: 0, queue: [], queued: 0, progress: 0, blocked: false, pending: [], pendingBytes: 0,
        closeFired: false, lost: false,
        onmessage: null, onclose: null, onerror: null, onopen: null, url: url === undefined ? null : StringCtor(url) });
    }
    get readyState() { return socketState.get(this).readyState; }
    get url() { return socketState.get(this).url; }
    get protocol() { return ''; }
    get extensions() { return ''; }
    get binaryType() { return 'arraybuffer'; }
    set binaryType(v) { if (v !== 'arraybuffer') throw new TypeErrorCtor('binaryType is always "arraybuffer" here.'); }
    accept() {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('accept() is called on the server end of a WebSocketPair.');
      if (st.accepted) return;
      st.accepted = true;
      if (st.readyState === 0) st.readyState = 1;
      // What waited for accept() goes once the caller has added its
      // listeners (the lines after accept()).
      const pending = st.pending; st.pending = []; st.pendingBytes = 0;
      if (pending.length > 0) promiseThen.call(promiseResolve(undefined), () => { for (const ev of pending) fireSocket(this, ev); });
    }
    send(message) {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('Send on the server end of a WebSocketPair; the client end belongs to the visitor.');
      if (!st.accepted) throw new TypeErrorCtor('You must call accept() on this WebSocket before sending messages.');
      // A socket the gateway gave up (its visitor stopped reading) takes
      // sends without a word until its close event: a room that
      // broadcasts does not throw on it.
      if (st.lost && st.readyState < 3) return;
      if (st.readyState !== 1) throw new TypeErrorCtor('Can\'t call WebSocket send() after close().');
      let record;
      if (typeof message === 'string') record = socketRecord('t', utf8Latin1(message));
      else if (message instanceof ArrayBuffer || ArrayBuffer.isView(message)) record = socketRecord('b', latin1FromBytes(toBytes(message)));
      else record = socketRecord('t', utf8Latin1(StringCtor(message)));
      writeSocket(this, st, record);
    }
    close(code = undefined, reason = undefined) {
      const st = socketState.get(this);
      if (st.client) throw new TypeErrorCtor('Close the server end of a WebSocketPair.');
      if (st.readyState >= 2) return;
      if (code !== undefined) {
        code = +code;
        if (!(code === 1000 || (code >= 3000 && code <= 4999)) || (code | 0) !== code) throw domException('The close code must be 1000 or in 3000-4999.', 'InvalidAccessError');
      }
      const why = reason === undefined ? '' : utf8Latin1(StringCtor(reason));
      if (why.length > 123) throw domException('The close reason is longer than 123 bytes.', 'SyntaxError');
      const c = code === undefined ? 1000 : code;
      st.readyState = 2;
      writeSocket(this, st, socketRecord('c', fromCharCode((c >> 8) & 255, c & 255) + why));
    }
  }
  for (const [name, v] of [['CONNECTING', 0], ['OPEN', 1], ['CLOSING', 2], ['CLOSED', 3]]) {
    defineProperty(WebSocket, name, { value: v, enumerable: true }); defineProperty(WebSocket.prototype, name, { value: v, enumerable: true });
  }
  for (const name of ['onmessage', 'onclose', 'onerror', 'onopen']) {
    defineProperty(WebSocket.prototype, name, { configurable: true, enumerable: true,
      get() { return socketState.get(this)[name]; },
      set(v) { socketState.get(this)[name] = typeof v === 'function' ? v : null; } });
  }
  hidden(G, 'WebSocket', WebSocket);
  class WebSocketPair {
    constructor() {
      makingSocket = true;
      let client, server;
      try { client = new WebSocket(); server = new WebSocket(); } finally { makingSocket = false; }
      const cs = socketState.get(client), ss = socketState.get(server);
      cs.client = true; cs.peer = server; ss.peer = client;
      this[0] = client; this[1] = server;
    }
  }
  hidden(G, 'WebSocketPair', WebSocketPair);

  // writeSocket sends a record, or queues it behind the stream's window.
  function writeSocket(ws, st, record) {
    if (st.stream === 0 || st.blocked || st.queue.length > 0) {
      st.queue.push(record);
      const cost = record.length + recordCost;
      st.queued += cost; queuedAll += cost;
      if (!queuing.has(st)) { queuing.add(st); st.progress = ++progressTick; }
      boundQueues();
      return;
    }
    if (!host.streamWrite(st.stream, record)) st.blocked = true;
  }
  // boundQueues closes the socket read least recently (then the one with
  // the most waiting) while all sockets' waiting sends are past the
  // isolate's share. A socket's progress is when it last drained, or began
  // to wait.
  function boundQueues() {
    if (queueBound < 0) queueBound = coldHost('socketQueueBound')();
    while (queuedAll > queueBound) {
      let most = null;
      for (const st of queuing) if (most === null || st.progress < most.progress || st.progress === most.progress && st.queued > most.queued) most = st;
      if (most === null) { queuedAll = 0; return; }
      abandonSocket(most);
    }
  }
  // dropQueue drops what waits on a socket.
  function dropQueue(st) {
    queuedAll -= st.queued;
    st.queue = []; st.queued = 0;
    queuing.delete(st);
  }
  // flushSocket writes what waits, as the window allows.
  function flushSocket(st) {
    st.blocked = false;
    st.progress = ++progressTick;
    while (st.queue.length > 0 && !st.blocked) {
      const r = st.queue.shift();
      const cost = r.length + recordCost;
      st.queued -= cost; queuedAll -= cost;
      if (!host.streamWrite(st.stream, r)) st.blocked = true;
    }
    if (st.queue.length === 0) queuing.delete(st);
  }
  // closeRecord is a close's record: its code, then its reason.
  function closeRecord(code, why) { return socketRecord('c', fromCharCode((code >> 8) & 255, code & 255) + why); }
  // abandonSocket closes a socket whose visitor stopped reading: what waits
  // is dropped, the close goes at once; the close event follows when the
  // gateway has closed the visitor.
  function abandonSocket(st) {
    dropQueue(st); st.lost = true;
    if (st.readyState < 2) st.readyState = 2;
    if (st.stream !== 0) host.streamWrite(st.stream, closeRecord(1008, 'the visitor is not reading'));
  }
  // socketClosed gives a socket its one close event: at once when it was
  // accepted, else when it is. The socket is then done with.
  function socketClosed(ws, st, code, reason) {
    if (st.closeFired) return [];
    st.closeFired = true;
    st.readyState = 3;
    dropQueue(st);
    const ev = new CloseEvent('close', { code, reason, wasClean: code !== 1006 });
    if (!st.accepted) { st.pending = [ev]; st.pendingBytes = 0; return []; }
    return fireSocket(ws, ev);
  }
  // socketLetGo is the gateway letting a socket's stream go (cancelStream):
  // its close event, if nothing gave it one (a refused upgrade, an event the
  // gateway could not deliver).
  function socketLetGo(id, st) {
    const ws = socketsByStream.get(id);
    socketsByStream.delete(id);
    if (ws !== undefined) socketClosed(ws, st, 1006, '');
  }
  // acceptSocket answers a handler's 101: the server end's records go out
  // on a new stream.
  function acceptSocket(res, client) {
    const server = socketState.get(client).peer;
    const st = socketState.get(server);
    if (st.stream !== 0) throw new TypeErrorCtor('This WebSocket was already returned in a response.');
    const id = nextStream++;
    hostStreamOpen(id);
    st.stream = id;
    socketsByStream.set(id, server);
    pumping.set(id, { socket: st });
    if (st.queue.length > 0) flushSocket(st);
    return wireHead(res, '1', id, '');
  }
  // socketEvent delivers the visitor's message or close to the handler's
  // end (url "socket:<stream>:<kind>:<code>").
  function socketEvent(url, kind, bodyArg) {
    const [, idText, what, codeText] = stringSplit.call(url, ':');
    const ws = socketsByStream.get(+idText);
    if (ws === undefined) return wireHead(new Response(null, { status: 410 }), '0', 0, '');
    const st = socketState.get(ws);
    const raw = bodyArg === null ? '' : bodyArg;
    const text = () => kind === 't' || kind === 'a' ? raw : textFromLatin1(raw);
    const done = () => wireHead(new Response(null, { status: 204 }), '0', 0, '');
    // After its close event a socket takes no event (exactly one close).
    if (st.closeFired) return done();
    if (what === 'c') return settleSocketEvent(socketClosed(ws, st, +codeText, text()));
    if (!st.accepted) {
      // Before accept(), at most maxPending bytes of messages wait; past
      // them the socket closes with 1008 (docs/websockets.md).
      st.pendingBytes += raw.length;
      if (st.pendingBytes > maxPending) {
        const why = 'over 1 MiB of messages before accept()';
        socketClosed(ws, st, 1008, why);
        host.streamWrite(st.stream, closeRecord(1008, why));
        return done();
      }
    }
    let ev;
    if (what === 't') {
      ev = new MessageEvent('message', { data: text() });
    } else {
      ev = new MessageEvent('message', { data: (kind === 't' ? bytesFromLatin1(utf8Latin1(raw)) : bytesFromLatin1(raw)).buffer });
    }
    if (!st.accepted) { st.pending.push(ev); return done(); }
    return settleSocketEvent(fireSocket(ws, ev));
  }
  // An event's invocation lasts until the promises its listeners answered
  // settle, so a one-at-a-time handle takes a socket's messages one at a
  // time, each within the invocation bound.
  async function settleSocketEvent(results) {
    for (const p of results) { try { await p; } catch (e) { reportError(e); } }
    return wireHead(new Response(null, { status: 204 }), '0', 0, '');
  }
  function fireSocket(ws, ev) {
    const saved = listenerResults;
    const results = [];
    listenerResults = results;
    try {
      dispatchTo(ws, ev, true);
      const h = socketState.get(ws)['on' + ev.type];
      if (h) {
        try {
          const r = h.call(ws, ev);
          if (r !== null && typeof r === 'object' && typeof r.then === 'function') results.push(r);
        } catch (e) { reportError(e); }
      }
    } finally { listenerResults = saved; }
    return results;
  }

