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
// v8go gives every isolate it makes the allocator in its global
// default_allocator (v8go.cc), which it sets when it starts V8, with the
// process's first isolate; bufferpool.go puts the pool in its place right
// after that isolate is made, so every later isolate uses the pool (the
// first keeps V8's allocator, and frees its buffers through it).
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "v8-array-buffer.h"

#include "bufferpool.h"

extern v8::ArrayBuffer::Allocator* default_allocator;  // rogchap.com/v8go's

namespace {

constexpr size_t kPage = 4096;
constexpr int kClasses = 5;                  // 4 KiB << 0 .. 4
constexpr size_t kMaxPooled = 16u << 20;     // bytes kept a process

class PooledAllocator : public v8::ArrayBuffer::Allocator {
 public:
  explicit PooledAllocator(v8::ArrayBuffer::Allocator* backing) : backing_(backing) {
    // Room for as many blocks as the bound allows, so that keeping one
    // never allocates (an allocation failure would abort: no exceptions).
    for (int c = 0; c < kClasses; c++) free_[c].reserve(kMaxPooled / (kPage << c));
  }

  void* Allocate(size_t length) override {
    void* p = take(length);
    if (p == nullptr) return backing_->Allocate(blockSize(length));
    memset(p, 0, length);
    return p;
  }

  void* AllocateUninitialized(size_t length) override { return Allocate(length); }

  void Free(void* data, size_t length) override {
    if (data != nullptr && !keep(data, length)) backing_->Free(data, blockSize(length));
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

  v8::ArrayBuffer::Allocator* backing_;
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

extern "C" uint64_t retainer_array_buffers_reused(void) { return thePool == nullptr ? 0 : thePool->reused(); }
