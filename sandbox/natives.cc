// The runtime's byte and text conversions, as V8 functions written in C++.
//
// Why: the engine runs V8 --jitless, where a JavaScript loop over a string
// or a Uint8Array costs 20–80 ns a byte. TextEncoder.encode, TextDecoder,
// request.arrayBuffer() and every crypto.subtle input went through such
// loops (a 115 KB TextEncoder.encode took 8.9 ms). V8 converts between
// strings and bytes natively; these functions hand that to the bootstrap.
//
// They are one function, Convert(op, ...), which retainer_install_natives
// puts on the current context's global object as "__retainerNatives"; the
// bootstrap has it called (through a host function, natives.go) before any
// program runs, takes the function and deletes the property, so no program
// can reach it. Each checks its arguments' types and answers undefined for
// any it was not written for: the bootstrap then takes its JavaScript
// path, so an unusual argument keeps the behaviour it always had.
//
// The bootstrap allocates every Uint8Array (the usual RangeError and
// bounds apply), and strings are made by V8's own factory, under the
// isolate's heap limit; a string longer than V8 allows is a RangeError.
// The two conversions between Latin-1 strings and UTF-8 need bytes in
// between: a scratch buffer outside the V8 heap, at most three bytes a
// character of a string the heap already holds, given back before they
// return; one the process cannot have (the worker's data rlimit) answers
// undefined, never an abort.
#include <stdint.h>
#include <stdlib.h>

#include "v8-array-buffer.h"
#include "v8-container.h"
#include "v8-context.h"
#include "v8-exception.h"
#include "v8-function-callback.h"
#include "v8-function.h"
#include "v8-isolate.h"
#include "v8-local-handle.h"
#include "v8-object.h"
#include "v8-primitive.h"
#include "v8-template.h"
#include "v8-typed-array.h"

#include "natives.h"

using v8::FunctionCallbackInfo;
using v8::Isolate;
using v8::Local;
using v8::String;
using v8::Value;

namespace {

// kOnHeap bounds the typed arrays V8 keeps inside its heap, without an
// ArrayBuffer (--typed-array-max-size-in-heap, 64 by default).
constexpr size_t kOnHeap = 64;

// bytesToWrite gives the bytes a Uint8Array views, to write into; false
// for anything else, and for a small array V8 keeps on its heap: asking
// for its buffer would make one, and this V8 (its sandbox's ArrayBuffer
// allocator) gives every buffer a 4 KiB page of its own and returns it
// with an mmap, which costs every CPU the process runs on a TLB flush.
// The bootstrap's JavaScript writes those few bytes instead.
bool bytesToWrite(Local<Value> v, uint8_t** data, size_t* len) {
  if (!v->IsUint8Array()) return false;
  Local<v8::Uint8Array> a = v.As<v8::Uint8Array>();
  if (!a->HasBuffer()) return false;
  *len = a->ByteLength();
  *data = *len > 0 ? static_cast<uint8_t*>(a->Buffer()->Data()) + a->ByteOffset() : nullptr;
  return true;
}

// bytesToRead gives the bytes a Uint8Array views, to read; a small array
// on V8's heap is copied into small (see bytesToWrite for why not its
// buffer). False for anything but a Uint8Array.
bool bytesToRead(Local<Value> v, uint8_t** data, size_t* len, uint8_t (&small)[kOnHeap]) {
  if (!v->IsUint8Array()) return false;
  Local<v8::Uint8Array> a = v.As<v8::Uint8Array>();
  *len = a->ByteLength();
  if (*len == 0) {
    *data = nullptr;
  } else if (!a->HasBuffer() && *len <= kOnHeap) {
    *len = a->CopyContents(small, *len);
    *data = small;
  } else {
    *data = static_cast<uint8_t*>(a->Buffer()->Data()) + a->ByteOffset();
  }
  return true;
}

// Scratch is a malloc'd buffer freed when it goes out of scope; p is null
// when the allocation failed.
struct Scratch {
  uint8_t* p;
  explicit Scratch(size_t n) : p(static_cast<uint8_t*>(malloc(n))) {}
  ~Scratch() { free(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// Latin1Chars is a string's characters, each up to U+00FF (the caller
// checked), as bytes in a scratch buffer: buf.p is null when malloc
// refused it.
struct Latin1Chars {
  size_t n;
  Scratch buf;
  Latin1Chars(Isolate* iso, Local<String> s) : n(static_cast<size_t>(s->Length())), buf(n + 1) {
    if (buf.p != nullptr && n > 0) s->WriteOneByte(iso, buf.p, 0, static_cast<int>(n), String::NO_NULL_TERMINATION);
  }
};

void throwRange(Isolate* iso, const char* msg) {
  iso->ThrowException(v8::Exception::RangeError(String::NewFromUtf8(iso, msg).ToLocalChecked()));
}

// answerString sets the return value to a string made from len bytes of
// data by make (the empty string for none), or throws a RangeError when V8
// cannot make it.
template <typename Make>
void answerString(const FunctionCallbackInfo<Value>& info, size_t len, Make make) {
  Isolate* iso = info.GetIsolate();
  if (len == 0) {
    info.GetReturnValue().SetEmptyString();
    return;
  }
  if (len > static_cast<size_t>(String::kMaxLength)) {
    throwRange(iso, "Invalid string length");
    return;
  }
  Local<String> s;
  if (!make(static_cast<int>(len)).ToLocal(&s)) {
    if (!iso->IsExecutionTerminating()) throwRange(iso, "Invalid string length");
    return;
  }
  info.GetReturnValue().Set(s);
}

// utf8Length(s): the length of s in UTF-8, a lone surrogate counting as
// the three bytes of U+FFFD that writeUtf8 writes for it.
void Utf8Length(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 2 || !info[1]->IsString()) return;
  info.GetReturnValue().Set(info[1].As<String>()->Utf8Length(info.GetIsolate()));
}

// writeUtf8 writes s as UTF-8 (a lone surrogate as U+FFFD, the Encoding
// Standard's conversion) into the bytes, as much of it as fits without
// cutting a character; read is the UTF-16 units it took.
int writeUtf8(Isolate* iso, Local<String> s, uint8_t* data, size_t len, int* read) {
  int capacity = len > 0x7fffffff ? 0x7fffffff : static_cast<int>(len);
  *read = 0;
  if (capacity == 0) return 0;
  return s->WriteUtf8(iso, reinterpret_cast<char*>(data), capacity, read,
                      String::NO_NULL_TERMINATION | String::REPLACE_INVALID_UTF8);
}

// writeUtf8(s, u8): s as UTF-8 into u8 (writeUtf8 above); answers the
// bytes written.
void WriteUtf8(const FunctionCallbackInfo<Value>& info) {
  uint8_t* data;
  size_t len;
  if (info.Length() < 3 || !info[1]->IsString() || !bytesToWrite(info[2], &data, &len)) return;
  int read;
  info.GetReturnValue().Set(writeUtf8(info.GetIsolate(), info[1].As<String>(), data, len, &read));
}

// encodeInto(s, u8): TextEncoder.encodeInto's work: [UTF-16 units read,
// bytes written].
void EncodeInto(const FunctionCallbackInfo<Value>& info) {
  uint8_t* data;
  size_t len;
  if (info.Length() < 3 || !info[1]->IsString() || !bytesToWrite(info[2], &data, &len)) return;
  Isolate* iso = info.GetIsolate();
  int read;
  int written = writeUtf8(iso, info[1].As<String>(), data, len, &read);
  Local<Value> both[2] = {v8::Integer::New(iso, read), v8::Integer::New(iso, written)};
  info.GetReturnValue().Set(v8::Array::New(iso, both, 2));
}

// writeLatin1(s, u8): each UTF-16 unit of s as one byte (its low eight
// bits, as storing it in a Uint8Array would), into u8 from its start;
// answers the bytes written.
void WriteLatin1(const FunctionCallbackInfo<Value>& info) {
  uint8_t* data;
  size_t len;
  if (info.Length() < 3 || !info[1]->IsString() || !bytesToWrite(info[2], &data, &len)) return;
  Local<String> s = info[1].As<String>();
  size_t n = static_cast<size_t>(s->Length());
  if (n > len) n = len;
  int written = 0;
  if (n > 0) written = s->WriteOneByte(info.GetIsolate(), data, 0, static_cast<int>(n), String::NO_NULL_TERMINATION);
  info.GetReturnValue().Set(written);
}

// latin1(u8): the string whose characters are u8's bytes.
void Latin1(const FunctionCallbackInfo<Value>& info) {
  uint8_t small[kOnHeap];
  uint8_t* data;
  size_t len;
  if (info.Length() < 2 || !bytesToRead(info[1], &data, &len, small)) return;
  answerString(info, len, [&](int n) { return String::NewFromOneByte(info.GetIsolate(), data, v8::NewStringType::kNormal, n); });
}

// utf8(u8): u8 decoded as UTF-8, each maximal invalid subsequence as one
// U+FFFD (V8's decoder follows the Encoding Standard); a byte order mark
// is kept (the bootstrap decides about it).
void Utf8(const FunctionCallbackInfo<Value>& info) {
  uint8_t small[kOnHeap];
  uint8_t* data;
  size_t len;
  if (info.Length() < 2 || !bytesToRead(info[1], &data, &len, small)) return;
  answerString(info, len, [&](int n) {
    return String::NewFromUtf8(info.GetIsolate(), reinterpret_cast<const char*>(data), v8::NewStringType::kNormal, n);
  });
}

// utf8OfLatin1(s): the bytes a Latin-1 string s holds (one a character),
// decoded as UTF-8 as utf8 does; undefined when s has a character above
// U+00FF (it holds no bytes then).
void Utf8OfLatin1(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 2 || !info[1]->IsString()) return;
  Isolate* iso = info.GetIsolate();
  Local<String> s = info[1].As<String>();
  if (!s->ContainsOnlyOneByte()) return;
  Latin1Chars bytes(iso, s);
  if (bytes.buf.p == nullptr) return;
  answerString(info, bytes.n, [&](int len) {
    return String::NewFromUtf8(iso, reinterpret_cast<const char*>(bytes.buf.p), v8::NewStringType::kNormal, len);
  });
}

// latin1OfUtf8(s): the UTF-8 bytes of s (writeUtf8 above) as a Latin-1
// string, a character a byte.
void Latin1OfUtf8(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 2 || !info[1]->IsString()) return;
  Isolate* iso = info.GetIsolate();
  Local<String> s = info[1].As<String>();
  int n = s->Utf8Length(iso);
  if (n == 0) {
    info.GetReturnValue().SetEmptyString();
    return;
  }
  Scratch bytes(static_cast<size_t>(n));
  if (bytes.p == nullptr) return;
  int read;
  int written = writeUtf8(iso, s, bytes.p, static_cast<size_t>(n), &read);
  answerString(info, static_cast<size_t>(written), [&](int len) {
    return String::NewFromOneByte(iso, bytes.p, v8::NewStringType::kNormal, len);
  });
}

const char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// base64Of(x): x (a Uint8Array, or a string of characters up to U+00FF,
// each a byte: btoa's argument) in base64 with padding; undefined for a
// string with a character past U+00FF (btoa's JavaScript throws then).
void Base64Of(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 2) return;
  Isolate* iso = info.GetIsolate();
  uint8_t small[kOnHeap];
  uint8_t* data;
  size_t len;
  bool isBytes = bytesToRead(info[1], &data, &len, small);
  if (!isBytes && (!info[1]->IsString() || !info[1].As<String>()->ContainsOnlyOneByte())) return;
  // A string: its characters as bytes (nothing copied for a Uint8Array).
  Latin1Chars held(iso, isBytes ? String::Empty(iso) : info[1].As<String>());
  if (held.buf.p == nullptr) return;
  if (!isBytes) {
    data = held.buf.p;
    len = held.n;
  }
  size_t outLen = (len + 2) / 3 * 4;
  Scratch out(outLen > 0 ? outLen : 1);
  if (out.p == nullptr) return;
  size_t o = 0, i = 0;
  for (; i + 2 < len; i += 3) {
    uint32_t n = uint32_t(data[i]) << 16 | uint32_t(data[i + 1]) << 8 | data[i + 2];
    out.p[o++] = kBase64[n >> 18];
    out.p[o++] = kBase64[(n >> 12) & 63];
    out.p[o++] = kBase64[(n >> 6) & 63];
    out.p[o++] = kBase64[n & 63];
  }
  if (i < len) {
    uint32_t n = uint32_t(data[i]) << 16 | (i + 1 < len ? uint32_t(data[i + 1]) << 8 : 0);
    out.p[o++] = kBase64[n >> 18];
    out.p[o++] = kBase64[(n >> 12) & 63];
    out.p[o++] = i + 1 < len ? kBase64[(n >> 6) & 63] : '=';
    out.p[o++] = '=';
  }
  answerString(info, o, [&](int n) { return String::NewFromOneByte(iso, out.p, v8::NewStringType::kNormal, n); });
}

// fromBase64(s): the Infra standard's forgiving-base64 decode of s (ASCII
// whitespace dropped, "=" or "==" at the end of a length divisible by four
// dropped, the bits of a last partial byte ignored), its bytes as a
// Latin-1 string; null when s is not base64 (atob then throws).
void FromBase64(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 2 || !info[1]->IsString()) return;
  Isolate* iso = info.GetIsolate();
  Local<String> s = info[1].As<String>();
  if (!s->ContainsOnlyOneByte()) {  // a character past U+00FF is not base64
    info.GetReturnValue().SetNull();
    return;
  }
  Latin1Chars chars(iso, s);
  uint8_t* in = chars.buf.p;
  if (in == nullptr) return;
  size_t m = 0;
  for (size_t i = 0; i < chars.n; i++) {
    uint8_t c = in[i];
    if (c != '\t' && c != '\n' && c != '\f' && c != '\r' && c != ' ') in[m++] = c;
  }
  if (m % 4 == 0 && m > 0 && in[m - 1] == '=') {
    m--;
    if (m > 0 && in[m - 1] == '=') m--;
  }
  if (m % 4 == 1) {
    info.GetReturnValue().SetNull();
    return;
  }
  Scratch out(m / 4 * 3 + 3);
  if (out.p == nullptr) return;
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < m; i++) {
    uint8_t c = in[i];
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else {
      info.GetReturnValue().SetNull();
      return;
    }
    acc = (acc << 6 | uint32_t(v)) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.p[o++] = uint8_t(acc >> bits);
    }
  }
  answerString(info, o, [&](int len) { return String::NewFromOneByte(iso, out.p, v8::NewStringType::kNormal, len); });
}

// Convert(op, ...) is every conversion behind one V8 function: a function
// template costs each new isolate ~8 µs to make, and there would be eight.
// The ops are numbered as the runtime numbers them (js/runtime/04-natives.js);
// each function above is named there as its comment names it, and takes
// its arguments after the op.
void Convert(const FunctionCallbackInfo<Value>& info) {
  if (info.Length() < 1 || !info[0]->IsInt32()) return;
  switch (info[0].As<v8::Int32>()->Value()) {
    case 0: return Utf8Length(info);
    case 1: return WriteUtf8(info);
    case 2: return EncodeInto(info);
    case 3: return WriteLatin1(info);
    case 4: return Latin1(info);
    case 5: return Utf8(info);
    case 6: return Utf8OfLatin1(info);
    case 7: return Latin1OfUtf8(info);
    case 8: return Base64Of(info);
    case 9: return FromBase64(info);
  }
}

}  // namespace

extern "C" int retainer_install_natives(void* isolate) {
  Isolate* iso = static_cast<Isolate*>(isolate);
  v8::HandleScope scope(iso);
  Local<v8::Context> ctx = iso->GetCurrentContext();
  if (ctx.IsEmpty()) return 0;
  Local<v8::Function> fn;
  if (!v8::FunctionTemplate::New(iso, Convert, Local<Value>(), Local<v8::Signature>(), 0, v8::ConstructorBehavior::kThrow)
           ->GetFunction(ctx)
           .ToLocal(&fn)) {
    return 0;
  }
  return ctx->Global()->Set(ctx, String::NewFromUtf8(iso, "__retainerNatives").ToLocalChecked(), fn).FromMaybe(false) ? 1 : 0;
}

extern "C" intptr_t retainer_natives_reference(void) { return reinterpret_cast<intptr_t>(Convert); }
