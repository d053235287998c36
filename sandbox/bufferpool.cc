// A pool in front of V8's ArrayBuffer allocator.
//
// Why: the V8 that rogchap.com/v8go links runs with its sandbox on, and
// the ArrayBuffer allocator the sandbox needs gives every buffer a 4 KiB
// page of its own, zeroes it, and gives it back with an mmap that drops
// the page (V8's TODO: "replace this with a more efficient allocator").
// That mmap flushes the TLB of every CPU the worker runs on, an
// interprocessor interrupt each, which on a virtual machine costs tens of
// microseconds: perf on a loop of crypto.subtle.sign showed 10% of its
// CPU in smp_call_function_many_cond under BackingStore::~BackingStore.
// Every Uint8Array over 64 bytes has such a buffer (a body, a
// TextEncoder's answer, a stream's chunk, a digest's ArrayBuffer).
//
// So freed buffers of up to 64 KiB are kept, by size class (4, 8, 16, 32
// and 64 KiB), and handed out again, zeroed, before V8's allocator is
// asked. Every block still comes from V8's allocator, so it lies inside
// the sandbox as V8 requires. The pool holds at most kMaxPooled bytes a
// process; a buffer freed past that goes back to V8 as before. A block is
// zeroed when it is handed out, uninitialized or not: it held another
// buffer's bytes (the same tenant's, since a worker hosts one tenant, but
// perhaps another handle's).
//
// The pool also makes an isolate's ArrayBuffers count against its memory
// bound (docs/architecture.md, "Budgets"): they live outside V8's heap, so
// its limit never saw them (one default computation held 384 MiB of them
// under a 64 MiB bound). Each buffer is counted to the isolate that asked
// for it (the thread's current isolate, whose guard is in its data slot
// kGuardSlot), by its block's size; a buffer that would take the
// isolate's buffers and heap past the bound is refused. V8 then collects
// garbage and asks again (twice, then after a last full collection), so
// buffers that are only garbage never end a run; a refusal that stands
// becomes V8's RangeError, which the program cannot keep: the guard
// reports the hit (heaplimit.cc), an interrupt terminates the run at its
// next check, and the engine answers MEMORY and disposes the isolate.
// The heap's size is read only once the buffers pass a sixteenth of the
// bound (below it they cannot take an isolate far past it).
//
// v8go gives every isolate it makes the allocator in its global
// default_allocator (v8go.cc), which it sets when it starts V8, with the
// process's first isolate; bufferpool.go puts the pool in its place right
// after that isolate is made, so every later isolate uses the pool (the
// first keeps V8's allocator, and frees its buffers through it).
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "v8-array-buffer.h"
#include "v8-isolate.h"
#include "v8-statistics.h"

#include "bufferpool.h"
#include "heaplimit.h"

extern v8::ArrayBuffer::Allocator* default_allocator;  // rogchap.com/v8go's

namespace {

constexpr size_t kPage = 4096;
constexpr int kClasses = 5;                  // 4 KiB << 0 .. 4
constexpr size_t kMaxPooled = 16u << 20;     // bytes kept a process
constexpr uint32_t kGuardSlot = 1;           // v8go's context is in slot 0

// guardOf is the guard of the isolate current on this thread, if it has
// one.
retainer_heap_guard* guardOf() {
  v8::Isolate* iso = v8::Isolate::TryGetCurrent();
  return iso == nullptr ? nullptr : static_cast<retainer_heap_guard*>(iso->GetData(kGuardSlot));
}

// terminateIfRefused runs on the isolate's thread at its next interrupt
// check: a refusal that still stands (no later buffer was granted) ends
// the run.
void terminateIfRefused(v8::Isolate* iso, void* data) {
  retainer_heap_guard* g = static_cast<retainer_heap_guard*>(data);
  if (__atomic_load_n(&g->buffer_refused, __ATOMIC_SEQ_CST)) iso->TerminateExecution();
}

class PooledAllocator : public v8::ArrayBuffer::Allocator {
 public:
  explicit PooledAllocator(v8::ArrayBuffer::Allocator* backing) : backing_(backing) {
    // Room for as many blocks as the bound allows, so that keeping one
    // never allocates (an allocation failure would abort: no exceptions).
    for (int c = 0; c < kClasses; c++) free_[c].reserve(kMaxPooled / (kPage << c));
  }

  void* Allocate(size_t length) override {
    retainer_heap_guard* g = length == 0 ? nullptr : guardOf();
    if (g != nullptr && !admit(g, length)) return nullptr;
    void* p = take(length);
    if (p == nullptr) {
      p = backing_->Allocate(blockSize(length));
    } else {
      memset(p, 0, length);
    }
    if (g != nullptr && p != nullptr) count(g, p, length);
    return p;
  }

  void* AllocateUninitialized(size_t length) override { return Allocate(length); }

  void Free(void* data, size_t length) override {
    if (data == nullptr) return;
    uncount(data);
    if (!keep(data, length)) backing_->Free(data, blockSize(length));
  }

  // forget drops what is still counted to g.
  void forget(retainer_heap_guard* g) {
    std::lock_guard<std::mutex> guard(owners_mu_);
    for (auto it = owners_.begin(); it != owners_.end();) {
      it = it->second.guard == g ? owners_.erase(it) : std::next(it);
    }
  }

  uint64_t reused() {
    std::lock_guard<std::mutex> guard(mu_);
    return reused_;
  }

 private:
  // classOf is the size class of a buffer of length bytes; -1 for none (an
  // empty buffer, or one over 64 KiB, which V8's allocator keeps serving).
  static int classOf(size_t length) {
    if (length == 0) return -1;
    for (int c = 0; c < kClasses; c++) {
      if (length <= (kPage << c)) return c;
    }
    return -1;
  }

  // blockSize is what a buffer of length bytes is asked of V8 as: its
  // class's size, so that every block of a class can serve any buffer of
  // that class.
  static size_t blockSize(size_t length) {
    int c = classOf(length);
    return c < 0 ? length : kPage << c;
  }

  void* take(size_t length) {
    int c = classOf(length);
    if (c < 0) return nullptr;
    std::lock_guard<std::mutex> guard(mu_);
    if (free_[c].empty()) return nullptr;
    void* p = free_[c].back();
    free_[c].pop_back();
    pooled_ -= kPage << c;
    reused_++;
    return p;
  }

  bool keep(void* p, size_t length) {
    int c = classOf(length);
    if (c < 0) return false;
    std::lock_guard<std::mutex> guard(mu_);
    if (pooled_ + (kPage << c) > kMaxPooled || free_[c].size() == free_[c].capacity()) return false;
    free_[c].push_back(p);
    pooled_ += kPage << c;
    return true;
  }

  // charge is what a buffer of length bytes holds: its block, whole pages.
  static size_t charge(size_t length) { return (blockSize(length) + kPage - 1) & ~(kPage - 1); }

  // admit answers whether g's isolate may have a buffer of length bytes
  // more; a refusal is noted, and the interrupt asked for that ends the
  // run if it still stands then.
  static bool admit(retainer_heap_guard* g, size_t length) {
    size_t limit = g->buffer_limit;
    if (limit == 0) return true;
    size_t want = __atomic_load_n(&g->buffer_bytes, __ATOMIC_SEQ_CST) + charge(length);
    if (want > limit / 16) {
      v8::Isolate* iso = static_cast<v8::Isolate*>(g->isolate);
      v8::HeapStatistics hs;
      iso->GetHeapStatistics(&hs);
      if (want + hs.used_heap_size() > limit) {
        __atomic_store_n(&g->buffer_refused, 1, __ATOMIC_SEQ_CST);
        iso->RequestInterrupt(terminateIfRefused, g);
        return false;
      }
    }
    __atomic_store_n(&g->buffer_refused, 0, __ATOMIC_SEQ_CST);
    return true;
  }

  void count(retainer_heap_guard* g, void* p, size_t length) {
    size_t n = charge(length);
    __atomic_add_fetch(&g->buffer_bytes, n, __ATOMIC_SEQ_CST);
    std::lock_guard<std::mutex> guard(owners_mu_);
    owners_[p] = Owner{g, n};
  }

  void uncount(void* p) {
    std::lock_guard<std::mutex> guard(owners_mu_);
    auto it = owners_.find(p);
    if (it == owners_.end()) return;
    __atomic_sub_fetch(&it->second.guard->buffer_bytes, it->second.bytes, __ATOMIC_SEQ_CST);
    owners_.erase(it);
  }

  struct Owner {
    retainer_heap_guard* guard;
    size_t bytes;
  };

  v8::ArrayBuffer::Allocator* backing_;
  std::mutex owners_mu_;  // guards owners_
  std::unordered_map<void*, Owner> owners_;  // counted buffers, by address
  std::mutex mu_;  // guards what follows: V8 frees on its sweeper threads
  std::vector<void*> free_[kClasses];
  size_t pooled_ = 0;
  uint64_t reused_ = 0;  // blocks handed out again
};

PooledAllocator* thePool = nullptr;

}  // namespace

extern "C" int retainer_pool_array_buffers(void) {
  if (default_allocator == nullptr) return 0;
  if (thePool == nullptr) thePool = new PooledAllocator(default_allocator);
  default_allocator = thePool;
  return 1;
}

extern "C" void retainer_buffers_bound(retainer_heap_guard* g, size_t limit) {
  if (thePool == nullptr) return;  // V8's own allocator: nothing counts
  g->buffer_limit = limit;
  static_cast<v8::Isolate*>(g->isolate)->SetData(kGuardSlot, g);
}

extern "C" void retainer_buffers_forget(retainer_heap_guard* g) {
  if (thePool != nullptr) thePool->forget(g);
}

extern "C" uint64_t retainer_array_buffers_reused(void) { return thePool == nullptr ? 0 : thePool->reused(); }
