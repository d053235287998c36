  // ------------------------------------------------------------ bytes and text, natively
  // V8's own conversions between strings and bytes (natives.cc): under
  // --jitless a JavaScript loop costs 20 to 80 ns a byte. Each answers
  // undefined for an argument it was not made for (not a string, not a
  // Uint8Array), and the JavaScript below is then the answer, as before.
  // They are one function, convert(op, ...args), numbered as natives.cc's
  // Convert numbers them.
  // The startup snapshot's maker installs them itself (snapshot.cc).
  if (!G.__retainerNatives) coldHost('natives')();
  const convert = G.__retainerNatives;
  delete G.__retainerNatives;
  const nativeUtf8Length = (s) => convert(0, s), nativeWriteUtf8 = (s, b) => convert(1, s, b);
  const nativeEncodeInto = (s, b) => convert(2, s, b), nativeWriteLatin1 = (s, b) => convert(3, s, b);
  const nativeLatin1 = (b) => convert(4, b), nativeUtf8 = (b) => convert(5, b);
  const nativeUtf8OfLatin1 = (l) => convert(6, l), nativeLatin1OfUtf8 = (s) => convert(7, s);
  const nativeBase64Of = (x) => convert(8, x), nativeFromBase64 = (s) => convert(9, s);

