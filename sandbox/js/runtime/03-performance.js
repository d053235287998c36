  // ------------------------------------------------------------ performance
  // The clock starts per isolate: an isolate made from the startup
  // snapshot starts it when it is restored (startIsolate), since the time
  // the snapshot was made is not its own.
  let timeOrigin;
  function startClock() {
    timeOrigin = Date.now();
    hidden(G, 'performance', freeze({ timeOrigin, now() { return Date.now() - timeOrigin; } }));
  }
  startClock();

