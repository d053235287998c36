  return { runProgram, setEnv, invoke, fireTimer, pendingWork, reportError, settleHost, setGrants, setSource, streamDrained, cancelStream };
})
