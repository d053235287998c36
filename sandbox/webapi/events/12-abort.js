  // ------------------------------------------------------------ AbortController, AbortSignal
  const signalState = new WeakMap();
  let makingSignal = false;
  class AbortSignal extends EventTarget {
    constructor() {
      if (!makingSignal) throw new TypeErrorCtor('Illegal constructor');
      super();
      signalState.set(this, { aborted: false, reason: undefined, onabort: null });
    }
    get aborted() { return signalState.get(this).aborted; }
    get reason() { return signalState.get(this).reason; }
    get onabort() { return signalState.get(this).onabort; }
    set onabort(f) {
      // An event handler attribute: one listener, registered when first
      // set, so it runs in order with addEventListener's (HTML Standard).
      const s = signalState.get(this);
      if (!s.handlerAdded) {
        s.handlerAdded = true;
        this.addEventListener('abort', (ev) => { if (s.onabort) return s.onabort.call(this, ev); });
      }
      s.onabort = typeof f === 'function' ? f : null;
    }
    throwIfAborted() { const s = signalState.get(this); if (s.aborted) throw s.reason; }
    static abort(reason) { const s = newSignal(); abortSignal(s, reason); return s; }
    static timeout(ms) {
      const s = newSignal();
      setTimeout(() => abortSignal(s, domException('The operation timed out.', 'TimeoutError')), ms);
      return s;
    }
    static any(signals) {
      const s = newSignal();
      for (const other of signals) {
        if (other.aborted) { abortSignal(s, other.reason); return s; }
      }
      for (const other of signals) other.addEventListener('abort', () => abortSignal(s, other.reason), { once: true });
      return s;
    }
  }
  function newSignal() { makingSignal = true; try { return new AbortSignal(); } finally { makingSignal = false; } }
  function abortSignal(signal, reason) {
    const s = signalState.get(signal);
    if (s.aborted) return;
    s.aborted = true;
    s.reason = reason === undefined ? domException('This operation was aborted', 'AbortError') : reason;
    dispatchTo(signal, new Event('abort'), true);
  }
  class AbortController {
    #signal = newSignal();
    get signal() { return this.#signal; }
    abort(reason) { abortSignal(this.#signal, reason); }
  }
  hidden(G, 'AbortSignal', AbortSignal);
  hidden(G, 'AbortController', AbortController);

