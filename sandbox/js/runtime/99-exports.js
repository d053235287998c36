  // What an isolate made from the startup snapshot does first (install.go):
  // what V8 restores unlike a fresh context, and its own clock.
  function startIsolate() {
    noSharedMemory();
    startClock();
  }
  return { runProgram, setEnv, invoke, fireTimer, pendingWork, reportError, settleHost, setGrants, setSource, streamDrained, cancelStream, startIsolate };
})
