  // ------------------------------------------------------------ DOMException, Event, EventTarget
  // DOMException is made on first use: its 25 legacy constants, defined on
  // the class and its prototype, cost ~0.2 ms an isolate.
  const domExceptionClass = once(() => {
    const domCodes = { IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
      NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InUseAttributeError: 10, InvalidStateError: 11,
      SyntaxError: 12, InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15, TypeMismatchError: 17,
      SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21, QuotaExceededError: 22, TimeoutError: 23,
      InvalidNodeTypeError: 24, DataCloneError: 25 };
    class DOMException extends ErrorCtor {
      #name; #code;
      constructor(message = '', name = 'Error') {
        super(message);
        this.#name = StringCtor(name);
        this.#code = domCodes[this.#name] || 0;
      }
      get name() { return this.#name; }
      get code() { return this.#code; }
    }
    // The legacy code constants, on the constructor and its prototype.
    for (const [k, v] of [['INDEX_SIZE_ERR', 1], ['DOMSTRING_SIZE_ERR', 2], ['HIERARCHY_REQUEST_ERR', 3], ['WRONG_DOCUMENT_ERR', 4],
      ['INVALID_CHARACTER_ERR', 5], ['NO_DATA_ALLOWED_ERR', 6], ['NO_MODIFICATION_ALLOWED_ERR', 7], ['NOT_FOUND_ERR', 8],
      ['NOT_SUPPORTED_ERR', 9], ['INUSE_ATTRIBUTE_ERR', 10], ['INVALID_STATE_ERR', 11], ['SYNTAX_ERR', 12],
      ['INVALID_MODIFICATION_ERR', 13], ['NAMESPACE_ERR', 14], ['INVALID_ACCESS_ERR', 15], ['VALIDATION_ERR', 16],
      ['TYPE_MISMATCH_ERR', 17], ['SECURITY_ERR', 18], ['NETWORK_ERR', 19], ['ABORT_ERR', 20], ['URL_MISMATCH_ERR', 21],
      ['QUOTA_EXCEEDED_ERR', 22], ['TIMEOUT_ERR', 23], ['INVALID_NODE_TYPE_ERR', 24], ['DATA_CLONE_ERR', 25]]) {
      defineProperty(DOMException, k, { value: v, enumerable: true });
      defineProperty(DOMException.prototype, k, { value: v, enumerable: true });
    }
    return DOMException;
  });
  lazyGlobal('DOMException', domExceptionClass);
  function domException(message, name) {
    const DOMException = domExceptionClass();
    return new DOMException(message, name);
  }

  const eventState = new WeakMap();
  // Event and EventTarget as the DOM Standard has them for targets outside
  // a tree: flags, initEvent, cancelBubble/returnValue, passive and once
  // listeners, capture listeners first, the signal option.
  function eventInit(init) {
    if (init === undefined || init === null) return {};
    if (typeof init !== 'object' && typeof init !== 'function') throw new TypeErrorCtor('The event init must be an object.');
    return init;
  }
  class Event {
    constructor(type, init = undefined) {
      if (arguments.length === 0) throw new TypeErrorCtor('The event type is required.');
      init = eventInit(init);
      eventState.set(this, { type: StringCtor(type), bubbles: !!init.bubbles, cancelable: !!init.cancelable,
        composed: !!init.composed, defaultPrevented: false, target: null, currentTarget: null, stop: false,
        stopImmediate: false, dispatching: false, initialized: true, inPassive: false, phase: 0,
        timeStamp: Date.now() - timeOrigin, trusted: false });
      defineProperty(this, 'isTrusted', isTrustedDesc);
    }
    get type() { return eventState.get(this).type; }
    get bubbles() { return eventState.get(this).bubbles; }
    get cancelable() { return eventState.get(this).cancelable; }
    get composed() { return eventState.get(this).composed; }
    get defaultPrevented() { return eventState.get(this).defaultPrevented; }
    get target() { return eventState.get(this).target; }
    get currentTarget() { return eventState.get(this).currentTarget; }
    get srcElement() { return eventState.get(this).target; }
    get timeStamp() { return eventState.get(this).timeStamp; }
    get eventPhase() { return eventState.get(this).phase; }
    get returnValue() { return !eventState.get(this).defaultPrevented; }
    set returnValue(v) { if (!v) this.preventDefault(); }
    get cancelBubble() { return eventState.get(this).stop; }
    set cancelBubble(v) { if (v) eventState.get(this).stop = true; }
    composedPath() { const t = eventState.get(this).currentTarget; return t ? [t] : []; }
    preventDefault() { const s = eventState.get(this); if (s.cancelable && !s.inPassive) s.defaultPrevented = true; }
    stopPropagation() { eventState.get(this).stop = true; }
    stopImmediatePropagation() { const s = eventState.get(this); s.stop = true; s.stopImmediate = true; }
    initEvent(type, bubbles = false, cancelable = false) {
      if (arguments.length === 0) throw new TypeErrorCtor('initEvent needs a type.');
      const s = eventState.get(this);
      if (s.dispatching) return;
      s.initialized = true; s.stop = false; s.stopImmediate = false; s.defaultPrevented = false; s.trusted = false; s.target = null;
      s.type = StringCtor(type); s.bubbles = !!bubbles; s.cancelable = !!cancelable;
    }
  }
  // isTrusted is an own, unforgeable property of each event (the DOM's
  // [LegacyUnforgeable]): every event's shares one getter.
  const isTrustedGetter = { get isTrusted() { return eventState.get(this).trusted; } };
  const isTrustedDesc = { get: Object.getOwnPropertyDescriptor(isTrustedGetter, 'isTrusted').get, enumerable: true, configurable: false };
  for (const [k, v] of [['NONE', 0], ['CAPTURING_PHASE', 1], ['AT_TARGET', 2], ['BUBBLING_PHASE', 3]]) {
    defineProperty(Event, k, { value: v, enumerable: true }); defineProperty(Event.prototype, k, { value: v, enumerable: true });
  }
  hidden(G, 'Event', Event);
  const customDetail = new WeakMap();
  class CustomEvent extends Event {
    constructor(type, init = undefined) {
      if (arguments.length === 0) throw new TypeErrorCtor('The event type is required.');
      super(type, init);
      init = eventInit(init);
      customDetail.set(this, init.detail === undefined ? null : init.detail);
    }
    get detail() { return customDetail.get(this); }
    initCustomEvent(type, bubbles = false, cancelable = false, detail = null) {
      if (arguments.length === 0) throw new TypeErrorCtor('initCustomEvent needs a type.');
      if (eventState.get(this).dispatching) return;
      this.initEvent(type, bubbles, cancelable);
      customDetail.set(this, detail);
    }
  }
  hidden(G, 'CustomEvent', CustomEvent);
  const listenersOf = new WeakMap();
  function flattenOptions(options) {
    if (typeof options === 'boolean') return { capture: options };
    if (options === undefined || options === null) return {};
    return options;
  }
  function listenersFor(target) {
    let all = listenersOf.get(target);
    if (!all) { all = new MapCtor(); listenersOf.set(target, all); }
    return all;
  }
  class EventTarget {
    constructor() { listenersOf.set(this, new MapCtor()); }
    addEventListener(type, listener, options = {}) {
      options = flattenOptions(options);
      const capture = !!options.capture;
      const once = !!options.once, passive = !!options.passive;
      const signal = options.signal;
      if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeErrorCtor('The signal option must be an AbortSignal.');
      if (listener == null) return;
      if (signal && signal.aborted) return;
      const all = listenersFor(this);
      type = StringCtor(type);
      if (!all.has(type)) all.set(type, []);
      const list = all.get(type);
      if (list.some((l) => l.listener === listener && l.capture === capture)) return;
      list.push({ listener, capture, once, passive, removed: false });
      if (signal) signal.addEventListener('abort', () => this.removeEventListener(type, listener, { capture }));
    }
    removeEventListener(type, listener, options = {}) {
      options = flattenOptions(options);
      const list = listenersFor(this).get(StringCtor(type));
      if (!list) return;
      const i = list.findIndex((l) => l.listener === listener && l.capture === !!options.capture);
      if (i >= 0) { list[i].removed = true; list.splice(i, 1); }
    }
    dispatchEvent(event) {
      if (!(event instanceof Event)) throw new TypeErrorCtor('The argument is not an Event.');
      return dispatchTo(this, event, false);
    }
  }
  // listenerResults, while a socket event is dispatched, gathers the
  // promises its listeners answer, which the event then awaits
  // (docs/websockets.md).
  let listenerResults = null;
  // dispatchTo dispatches an event; trusted for the runtime's own (an abort).
  function dispatchTo(target, event, trusted) {
    {
      const s = eventState.get(event);
      if (s.dispatching || !s.initialized) throw domException('The event is already being dispatched.', 'InvalidStateError');
      s.trusted = trusted;
      s.dispatching = true;
      s.target = target; s.currentTarget = target; s.phase = 2;
      const list = (listenersFor(target).get(s.type) || []).slice();
      // At the target, capture listeners run first (DOM Standard).
      for (const capturePass of [true, false]) {
        for (const l of list) {
          if (s.stopImmediate) break;
          if (l.removed || l.capture !== capturePass) continue;
          if (l.once) EventTarget.prototype.removeEventListener.call(target, s.type, l.listener, { capture: l.capture });
          s.inPassive = l.passive;
          try {
            let r;
            if (typeof l.listener === 'function') r = l.listener.call(target, event);
            else if (l.listener && typeof l.listener.handleEvent === 'function') r = l.listener.handleEvent(event);
            if (listenerResults !== null && r !== null && typeof r === 'object' && typeof r.then === 'function') listenerResults.push(r);
          } catch (e) { reportError(e); }
          s.inPassive = false;
        }
      }
      s.dispatching = false; s.currentTarget = null; s.phase = 0;
      s.stop = false; s.stopImmediate = false;
      return !s.defaultPrevented;
    }
  }
  hidden(G, 'EventTarget', EventTarget);
  // The global object is an EventTarget too (as a worker's global scope):
  // listeners added to it run with it as `this`; the runtime itself
  // dispatches no events there.
  for (const name of ['addEventListener', 'removeEventListener', 'dispatchEvent']) {
    const method = EventTarget.prototype[name];
    hidden(G, name, { [name](...args) { return method.apply(G, args); } }[name]);
  }

