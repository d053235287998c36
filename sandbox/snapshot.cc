// The runtime's V8 startup snapshot: made once per process, then every
// isolate starts from it (docs/runtime.md, "Startup snapshot").
//
// Why: a fresh isolate compiled and ran the whole runtime before each
// program (~1 ms of CPU a computation, on top of V8's own start). A
// snapshot holds the runtime already run: an isolate made from it
// deserializes the installed globals instead.
//
// How, without patching v8go: v8go 0.9 makes every isolate with
// v8::Isolate::New and every context with v8::Context::New, and takes no
// snapshot. The link wraps both symbols (GNU ld's --wrap, snapshot_linux.go):
// v8go's calls land in the __wrap_ functions below, which add the snapshot
// to the isolate's parameters and, when the engine asks for the runtime's
// context on this thread, answer the snapshot's context instead of a new
// one (v8go's own context for the isolate and the engine's are then that
// one context: see t_runtime_context). Everything else goes to V8
// unchanged (__real_). The snapshot's default context is an empty one, so
// a context v8go makes for any other reason is what it was before.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "v8-container.h"
#include "v8-context.h"
#include "v8-exception.h"
#include "v8-function.h"
#include "v8-isolate.h"
#include "v8-local-handle.h"
#include "v8-locker.h"
#include "v8-microtask-queue.h"
#include "v8-object.h"
#include "v8-persistent-handle.h"
#include "v8-primitive.h"
#include "v8-script.h"
#include "v8-snapshot.h"
#include "v8-template.h"

#include "natives.h"
#include "snapshot.h"

using v8::Context;
using v8::HandleScope;
using v8::Isolate;
using v8::Local;
using v8::String;
using v8::Value;

namespace {

// The blob every isolate of the process starts from (empty: V8's own), set
// once before the first isolate that uses it and never changed after.
v8::StartupData g_blob{nullptr, 0};

// The natives (natives.cc) are the only C++ functions the runtime's heap
// holds; a snapshot names them by their index here, at creation and at
// every restore alike.
intptr_t g_references[2] = {0, 0};

// The runtime's context for the isolate this thread is making. v8go makes
// two contexts for an isolate: its own, for values made without one, as
// the isolate is made, and the engine's. The engine asks for the runtime
// (retainer_snapshot_next_context) before it makes the isolate; the first
// Context::New on the thread then restores the runtime's context from the
// snapshot and the second answers the same one, so an isolate deserializes
// one context, not two. Values v8go makes without a context are then made
// in the runtime's, which is the only realm the isolate has.
thread_local bool t_runtime_context = false;
// The old generation's bound for the next isolate made on this thread
// (retainer_isolate_heap; 0: V8's flags decide).
thread_local size_t t_old_space = 0;
thread_local Isolate* t_restored_isolate = nullptr;
thread_local v8::Global<Context>* t_restored = nullptr;

Local<String> str(Isolate* iso, const char* s) { return String::NewFromUtf8(iso, s).ToLocalChecked(); }

// fail copies the pending exception's text (or what) to *err.
void fail(Isolate* iso, v8::TryCatch& tc, const char* what, char** err) {
  const char* text = what;
  String::Utf8Value msg(iso, tc.Exception());
  if (tc.HasCaught() && *msg != nullptr) text = *msg;
  size_t n = strlen(what) + strlen(text) + 3;
  *err = static_cast<char*>(malloc(n));
  if (text == what) {
    snprintf(*err, n, "%s", what);
  } else {
    snprintf(*err, n, "%s: %s", what, text);
  }
}

// runRuntime runs the runtime's source in ctx with placeholder host
// functions that throw (nothing of the host may run while the snapshot is
// made: what it answered would be every isolate's), and leaves
// [internals, host] on the global object as __retainerRuntime for the
// engine to take at restore.
bool runRuntime(Isolate* iso, Local<Context> ctx, const char* src, int len, const char* hot, const char* cold, char** err) {
  v8::TryCatch tc(iso);
  if (!retainer_install_natives(iso)) {
    fail(iso, tc, "installing the natives", err);
    return false;
  }
  Local<String> source;
  if (!String::NewFromUtf8(iso, src, v8::NewStringType::kNormal, len).ToLocal(&source)) {
    fail(iso, tc, "the runtime's source", err);
    return false;
  }
  v8::ScriptOrigin origin(iso, str(iso, "runtime.js"));
  Local<v8::Script> script;
  Local<Value> bootVal;
  if (!v8::Script::Compile(ctx, source, &origin).ToLocal(&script) || !script->Run(ctx).ToLocal(&bootVal) || !bootVal->IsFunction()) {
    fail(iso, tc, "compiling the runtime", err);
    return false;
  }
  Local<Value> unbound;
  v8::ScriptOrigin placeholderOrigin(iso, str(iso, "runtime-snapshot.js"));
  Local<v8::Script> placeholder;
  if (!v8::Script::Compile(ctx, str(iso, "(function unbound() { throw new Error('a host function was called while the runtime snapshot was made'); })"), &placeholderOrigin).ToLocal(&placeholder) ||
      !placeholder->Run(ctx).ToLocal(&unbound)) {
    fail(iso, tc, "the placeholder host function", err);
    return false;
  }
  // The host object has the engine's host functions by name (install.go's
  // hotHost, handed here comma-separated), each the placeholder for now.
  Local<v8::Object> host = v8::Object::New(iso);
  for (const char *name = hot, *end; *name != '\0'; name = *end == ',' ? end + 1 : end) {
    end = strchr(name, ',');
    if (end == nullptr) end = name + strlen(name);
    Local<String> key;
    if (!String::NewFromUtf8(iso, name, v8::NewStringType::kNormal, static_cast<int>(end - name)).ToLocal(&key) ||
        !host->Set(ctx, key, unbound).FromMaybe(false)) {
      fail(iso, tc, "the host object", err);
      return false;
    }
  }
  Local<Value> args[2] = {host, str(iso, cold)};
  Local<Value> internals;
  if (!bootVal.As<v8::Function>()->Call(ctx, v8::Undefined(iso), 2, args).ToLocal(&internals)) {
    fail(iso, tc, "installing the runtime", err);
    return false;
  }
  Local<Value> both[2] = {internals, host};
  if (!ctx->Global()->Set(ctx, str(iso, "__retainerRuntime"), v8::Array::New(iso, both, 2)).FromMaybe(false)) {
    fail(iso, tc, "keeping the runtime's entry points", err);
    return false;
  }
  // The calls every isolate makes before its first program (the engine's
  // warm-up), made here so their functions' bytecode is in the snapshot.
  Local<v8::Script> training;
  v8::ScriptOrigin trainingOrigin(iso, str(iso, "runtime-training.js"));
  Local<Value> trainFn;
  if (!v8::Script::Compile(ctx, str(iso, "(function train(r) { r.setGrants('{}'); r.runProgram(0, true); })"), &trainingOrigin).ToLocal(&training) ||
      !training->Run(ctx).ToLocal(&trainFn) ||
      trainFn.As<v8::Function>()->Call(ctx, v8::Undefined(iso), 1, &internals).IsEmpty()) {
    fail(iso, tc, "training the runtime", err);
    return false;
  }
  ctx->GetMicrotaskQueue()->PerformCheckpoint(iso);
  if (tc.HasCaught()) {
    fail(iso, tc, "the runtime's installation", err);
    return false;
  }
  return true;
}

}  // namespace

// The library's SnapshotCreator constructor takes a StartupData* where the
// header it ships with (third_party/v8) says const StartupData*, so the
// header's declaration names a symbol the library does not have. The
// library's own is declared here by its symbol and called on storage for
// the object; every other member agrees with the header.
extern "C" void _ZN2v815SnapshotCreatorC1EPKlPNS_11StartupDataE(v8::SnapshotCreator* self, const intptr_t* external_references, v8::StartupData* existing_blob);

// V8's own snapshot, built into the library: the maker starts from it
// instead of building V8's heap from scratch (20 ms against 28 ms), so
// ours is V8's own plus the runtime's context. No public API answers it;
// this is its symbol.
extern "C" const v8::StartupData* _ZN2v88internal8Snapshot19DefaultSnapshotBlobEv();

extern "C" int retainer_snapshot_make(const char* src, int len, const char* hot, const char* cold, char** blob, int* blobLen, char** err) {
  g_references[0] = retainer_natives_reference();
  *blob = nullptr;
  *err = nullptr;
  v8::StartupData data{nullptr, 0};
  {
    alignas(v8::SnapshotCreator) unsigned char storage[sizeof(v8::SnapshotCreator)];
    v8::SnapshotCreator& creator = *reinterpret_cast<v8::SnapshotCreator*>(storage);
    v8::StartupData base = *_ZN2v88internal8Snapshot19DefaultSnapshotBlobEv();
    _ZN2v815SnapshotCreatorC1EPKlPNS_11StartupDataE(&creator, g_references, &base);
    Isolate* iso = creator.GetIsolate();
    bool ok;
    {
      v8::Locker locker(iso);
      {
        HandleScope scope(iso);
        creator.SetDefaultContext(Context::New(iso));
        Local<Context> ctx = Context::New(iso);
        {
          Context::Scope cscope(ctx);
          ok = runRuntime(iso, ctx, src, len, hot, cold, err);
        }
        if (ok) creator.AddContext(ctx);
      }
      if (ok) {
        data = creator.CreateBlob(v8::SnapshotCreator::FunctionCodeHandling::kKeep);
      } else {
        // A creator must make its blob before it is destroyed.
        data = creator.CreateBlob(v8::SnapshotCreator::FunctionCodeHandling::kClear);
        delete[] data.data;
        data = {nullptr, 0};
      }
    }
    creator.~SnapshotCreator();
  }
  if (data.data == nullptr) {
    if (*err == nullptr) {
      *err = strdup("V8 made no snapshot");
    }
    return 0;
  }
  *blob = static_cast<char*>(malloc(data.raw_size));
  memcpy(*blob, data.data, data.raw_size);
  *blobLen = data.raw_size;
  delete[] data.data;
  return 1;
}

extern "C" int retainer_snapshot_valid(const char* blob, int len) {
  v8::StartupData data{blob, len};
  return data.IsValid() ? 1 : 0;
}

extern "C" int retainer_snapshot_rehashable(const char* blob, int len) {
  v8::StartupData data{blob, len};
  return data.CanBeRehashed() ? 1 : 0;
}

extern "C" void retainer_snapshot_use(const char* blob, int len) {
  g_references[0] = retainer_natives_reference();
  g_blob.data = blob;
  g_blob.raw_size = len;
}

extern "C" void retainer_isolate_heap(size_t bytes) { t_old_space = bytes; }

extern "C" void retainer_snapshot_next_context(void) {
  t_runtime_context = true;
  // A context restored for an isolate that never asked for it (the engine
  // always does, right after) is dropped, not reset: its isolate may be
  // gone, and a reset would touch it.
  t_restored = nullptr;
  t_restored_isolate = nullptr;
}

#ifdef __linux__
extern "C" Isolate* __real__ZN2v87Isolate3NewERKNS0_12CreateParamsE(const Isolate::CreateParams& params);
extern "C" Local<Context> __real__ZN2v87Context3NewEPNS_7IsolateEPNS_22ExtensionConfigurationENS_10MaybeLocalINS_14ObjectTemplateEEENS5_INS_5ValueEEENS_33DeserializeInternalFieldsCallbackEPNS_14MicrotaskQueueE(
    Isolate* iso, v8::ExtensionConfiguration* extensions, v8::MaybeLocal<v8::ObjectTemplate> global_template, v8::MaybeLocal<Value> global_object,
    v8::DeserializeInternalFieldsCallback internal_fields_deserializer, v8::MicrotaskQueue* microtask_queue);

extern "C" Isolate* __wrap__ZN2v87Isolate3NewERKNS0_12CreateParamsE(const Isolate::CreateParams& params) {
  Isolate::CreateParams p = params;
  if (g_blob.data != nullptr && p.snapshot_blob == nullptr) {
    p.snapshot_blob = &g_blob;
    p.external_references = g_references;
  }
  if (t_old_space > 0) {
    p.constraints.set_max_old_generation_size_in_bytes(t_old_space);
    t_old_space = 0;
  }
  return __real__ZN2v87Isolate3NewERKNS0_12CreateParamsE(p);
}

extern "C" Local<Context> __wrap__ZN2v87Context3NewEPNS_7IsolateEPNS_22ExtensionConfigurationENS_10MaybeLocalINS_14ObjectTemplateEEENS5_INS_5ValueEEENS_33DeserializeInternalFieldsCallbackEPNS_14MicrotaskQueueE(
    Isolate* iso, v8::ExtensionConfiguration* extensions, v8::MaybeLocal<v8::ObjectTemplate> global_template, v8::MaybeLocal<Value> global_object,
    v8::DeserializeInternalFieldsCallback internal_fields_deserializer, v8::MicrotaskQueue* microtask_queue) {
  if (t_restored != nullptr) {
    // The engine's context: the one restored for v8go's own.
    v8::Global<Context>* restored = t_restored;
    t_restored = nullptr;
    Local<Context> ctx;
    if (t_restored_isolate == iso) ctx = restored->Get(iso);
    restored->Reset();
    delete restored;
    t_restored_isolate = nullptr;
    if (!ctx.IsEmpty()) return ctx;
  }
  if (t_runtime_context) {
    // v8go's own context, made as the isolate is.
    t_runtime_context = false;
    Local<Context> ctx;
    if (g_blob.data != nullptr && Context::FromSnapshot(iso, 0, internal_fields_deserializer, extensions, global_object, microtask_queue).ToLocal(&ctx)) {
      t_restored = new v8::Global<Context>(iso, ctx);
      t_restored_isolate = iso;
      return ctx;
    }
  }
  return __real__ZN2v87Context3NewEPNS_7IsolateEPNS_22ExtensionConfigurationENS_10MaybeLocalINS_14ObjectTemplateEEENS5_INS_5ValueEEENS_33DeserializeInternalFieldsCallbackEPNS_14MicrotaskQueueE(
      iso, extensions, global_template, global_object, internal_fields_deserializer, microtask_queue);
}

extern "C" int retainer_snapshot_wrapped(void) { return 1; }
#else
extern "C" int retainer_snapshot_wrapped(void) { return 0; }
#endif
