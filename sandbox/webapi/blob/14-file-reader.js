  // ------------------------------------------------------------ FileReader
  // The File API's reader: the read happens in a later task, its events
  // (loadstart, progress, load or error, loadend) as the spec orders them.
  const runtimeBtoa = G.btoa; // as the runtime installed it
  // FileReader and its ProgressEvent are made on first use.
  const fileReaderClasses = once(() => {
    class ProgressEvent extends Event {
      #lengthComputable; #loaded; #total;
      constructor(type, init = {}) {
        super(type, init);
        init = init || {};
        this.#lengthComputable = !!init.lengthComputable; this.#loaded = +init.loaded || 0; this.#total = +init.total || 0;
      }
      get lengthComputable() { return this.#lengthComputable; }
      get loaded() { return this.#loaded; }
      get total() { return this.#total; }
    }
    // eventHandlerAttributes defines `on<type>` attributes: one listener per
    // type, registered when first set, so it runs in order with
    // addEventListener's (HTML Standard).
    function eventHandlerAttributes(cls, types) {
      const handlers = new WeakMap();
      for (const type of types) {
        defineProperty(cls.prototype, 'on' + type, {
          configurable: true, enumerable: true,
          get() { const h = handlers.get(this); return h && h[type] ? h[type].fn : null; },
          set(f) {
            let h = handlers.get(this);
            if (!h) { h = {}; handlers.set(this, h); }
            if (!h[type]) {
              h[type] = { fn: null };
              const slot = h[type];
              this.addEventListener(type, (ev) => { if (slot.fn) return slot.fn.call(this, ev); });
            }
            h[type].fn = typeof f === 'function' || (f !== null && typeof f === 'object') ? f : null;
          },
        });
      }
    }
    class FileReader extends EventTarget {
      #state = 0; #result = null; #error = null; #read = 0;
      get readyState() { return this.#state; }
      get result() { return this.#result; }
      get error() { return this.#error; }
      #start(blob, as) {
        if (!(blob instanceof Blob)) throw new TypeErrorCtor('FileReader reads a Blob.');
        if (this.#state === 1) throw domException('The reader is already reading.', 'InvalidStateError');
        this.#state = 1; this.#result = null; this.#error = null;
        const id = ++this.#read;
        const bytes = blobBytes.get(blob).slice();
        const fire = (type) => dispatchTo(this, new ProgressEvent(type, { lengthComputable: true, loaded: type === 'loadstart' ? 0 : bytes.length, total: bytes.length }), true);
        setTimeout(() => {
          if (id !== this.#read) return; // aborted or restarted
          fire('loadstart');
          setTimeout(() => {
            if (id !== this.#read) return;
            try { this.#result = as(bytes); }
            catch (e) {
              this.#state = 2; this.#error = e; fire('error');
              if (this.#state !== 1) fire('loadend');
              return;
            }
            this.#state = 2;
            fire('progress');
            fire('load');
            if (this.#state !== 1) fire('loadend');
          }, 0);
        }, 0);
      }
      readAsArrayBuffer(blob) { this.#start(blob, (b) => b.buffer); }
      readAsBinaryString(blob) { this.#start(blob, (b) => latin1FromBytes(b)); }
      readAsText(blob, encoding = undefined) {
        this.#start(blob, (b) => {
          let d;
          try { d = new TextDecoder(encoding === undefined ? 'utf-8' : encoding); } catch { d = new TextDecoder('utf-8'); }
          return d.decode(b);
        });
      }
      readAsDataURL(blob) {
        const type = blob instanceof Blob && blob.type ? blob.type : 'application/octet-stream';
        this.#start(blob, (b) => 'data:' + type + ';base64,' + runtimeBtoa(latin1FromBytes(b)));
      }
      abort() {
        if (this.#state === 0 || this.#state === 2) { this.#result = null; return; }
        this.#read++; this.#state = 2; this.#result = null;
        dispatchTo(this, new ProgressEvent('abort'), true);
        if (this.#state !== 1) dispatchTo(this, new ProgressEvent('loadend'), true);
      }
    }
    for (const [k, v] of [['EMPTY', 0], ['LOADING', 1], ['DONE', 2]]) {
      defineProperty(FileReader, k, { value: v, enumerable: true }); defineProperty(FileReader.prototype, k, { value: v, enumerable: true });
    }
    eventHandlerAttributes(FileReader, ['loadstart', 'progress', 'load', 'abort', 'error', 'loadend']);
    return { ProgressEvent, FileReader };
  });
  lazyGlobal('ProgressEvent', () => fileReaderClasses().ProgressEvent);
  lazyGlobal('FileReader', () => fileReaderClasses().FileReader);

