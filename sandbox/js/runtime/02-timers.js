  // ------------------------------------------------------------ timers
  let nextTimer = 1;
  const timers = new MapCtor();
  function reportError(e) {
    try { host.log('error', 'Uncaught ' + inspect(e, 0, new SetCtor())); } catch (_) { }
  }
  function addTimer(cb, ms, args, repeat) {
    if (typeof cb !== 'function') throw new TypeErrorCtor('The callback must be a function.');
    const id = nextTimer++;
    ms = +ms;
    if (!(ms >= 1)) ms = repeat ? 1 : 0;
    timers.set(id, { cb, args, ms, repeat });
    host.setTimer(id, ms);
    return id;
  }
  hidden(G, 'setTimeout', function setTimeout(cb, ms, ...args) { return addTimer(cb, ms, args, false); });
  hidden(G, 'setInterval', function setInterval(cb, ms, ...args) { return addTimer(cb, ms, args, true); });
  function clear(id) {
    id = +id;
    if (timers.delete(id)) host.clearTimer(id);
  }
  hidden(G, 'clearTimeout', function clearTimeout(id) { clear(id); });
  hidden(G, 'clearInterval', function clearInterval(id) { clear(id); });
  function fireTimer(id) {
    const t = timers.get(id);
    if (!t) return;
    if (t.repeat) host.setTimer(id, t.ms); else timers.delete(id);
    try { t.cb.apply(G, t.args); } catch (e) { reportError(e); }
  }
  hidden(G, 'queueMicrotask', function queueMicrotask(cb) {
    if (typeof cb !== 'function') throw new TypeErrorCtor('The callback must be a function.');
    promiseThen.call(promiseResolve(), () => { try { cb(); } catch (e) { reportError(e); } });
  });

