  // ------------------------------------------------------------ stack traces
  // Traces point at the author's own text (docs/runtime.md, "Errors";
  // sandbox/positions.go says how): a program.js frame is told in the
  // author's file and line (a wrapped body's own lines, a bundled module's
  // name and line through the bundle's source map), and the runtime's own
  // frames are left out. The built-ins used are captured here, before any
  // program runs; a trace that cannot be told so falls back to V8's text.
  const errorToString = ErrorCtor.prototype.toString;
  const strCharCodeAt = String.prototype.charCodeAt;
  const strSlice = String.prototype.slice;
  const strLastIndexOf = String.prototype.lastIndexOf;
  let source = { file: '', line: 0, shift: 0, col1: 1, sources: null, mappings: '' };
  let mapLines = null; // the source map's segments by generated line, decoded on the first trace
  function setSource(json) { source = JSONparse(json); mapLines = null; }

  const base64Digit = new Int8Array(128).fill(-1);
  for (let i = 0; i < 64; i++) base64Digit['ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.charCodeAt(i)] = i;
  // decodeMappings reads a version 3 source map's mappings: for each
  // generated line, its segments as [column, source, line, column] runs
  // (0-based), the VLQ fields made absolute.
  function decodeMappings(m) {
    const lines = [];
    let line = [], gcol = 0, src = 0, sline = 0, scol = 0;
    let fields = [], value = 0, shift = 0;
    const endSegment = () => {
      if (fields.length >= 4) {
        gcol += fields[0]; src += fields[1]; sline += fields[2]; scol += fields[3];
        line.push(gcol, src, sline, scol);
      } else if (fields.length >= 1) gcol += fields[0];
      fields = [];
    };
    for (let i = 0; i < m.length; i++) {
      const c = strCharCodeAt.call(m, i);
      if (c === 59 /* ; */) { endSegment(); lines.push(line); line = []; gcol = 0; continue; }
      if (c === 44 /* , */) { endSegment(); continue; }
      const d = c < 128 ? base64Digit[c] : -1;
      if (d < 0) return lines;
      value += (d & 31) * 2 ** shift;
      if (d & 32) { shift += 5; continue; }
      fields.push(value % 2 ? -((value - 1) / 2) : value / 2);
      value = 0; shift = 0;
    }
    endSegment();
    lines.push(line);
    return lines;
  }

  // authorPosition tells a program.js position as "file:line:column" in
  // the author's terms, or null for a line the author did not write.
  function authorPosition(line, col) {
    let file = 'program.js';
    if (source.sources) {
      if (!mapLines) mapLines = decodeMappings(source.mappings);
      const segs = mapLines[line - source.shift - 1];
      if (!segs || segs.length === 0) return null;
      let k = 0;
      for (let i = 0; i < segs.length && segs[i] <= col - 1; i += 4) k = i;
      file = source.sources[segs[k + 1]];
      line = segs[k + 2] + 1;
      col = segs[k + 3] + 1;
    } else if (line === 1 && col > source.col1) {
      col -= source.col1;
    }
    if (file === 'program.js' && source.file) {
      if (line < source.line) return null;
      file = source.file;
      line = line - source.line + 1;
    }
    return file + ':' + line + ':' + col;
  }

  function isRuntimeFile(file) {
    return file === 'runtime.js' || strSlice.call(file, 0, 8) === 'runtime-';
  }

  function prepareStackTrace(error, frames) {
    let out;
    try { out = errorToString.call(error); } catch { out = 'Error'; }
    let v8Text = out;
    try {
      for (let i = 0; i < frames.length; i++) {
        const f = frames[i];
        const file = f.getFileName();
        let text = StringCtor(f);
        v8Text += '\n    at ' + text;
        if (typeof file === 'string' && isRuntimeFile(file)) continue;
        if (file === 'program.js') {
          const line = f.getLineNumber(), col = f.getColumnNumber();
          const where = authorPosition(line, col);
          if (where === null) continue;
          const at = 'program.js:' + line + ':' + col;
          const k = strLastIndexOf.call(text, at);
          if (k >= 0) text = strSlice.call(text, 0, k) + where + strSlice.call(text, k + at.length);
        }
        out += '\n    at ' + text;
      }
    } catch {
      return v8Text;
    }
    return out;
  }
  defineProperty(ErrorCtor, 'prepareStackTrace', { value: prepareStackTrace, writable: true, configurable: true, enumerable: false });

