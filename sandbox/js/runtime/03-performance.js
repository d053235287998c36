  // ------------------------------------------------------------ performance
  const timeOrigin = Date.now();
  hidden(G, 'performance', freeze({ timeOrigin, now() { return Date.now() - timeOrigin; } }));

