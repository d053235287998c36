// V8's random seeds from the kernel's getrandom(2), for rogchap.com/v8go,
// which does not expose v8::V8::SetEntropySource.
//
// Why: each isolate seeds its own random number generator (Math.random,
// the string hash seed, its heap's address hints) when it is created.
// Without an entropy source V8 reads /dev/urandom, and where it cannot
// (a worker's Landlock ruleset grants no file) it falls back to a seed
// made of the current time, which a program can guess. getrandom needs no
// file, and the worker's seccomp filter allows it (Go's crypto/rand uses it).
//
// As in heaplimit.cc, no V8 header is included: the one static member used
// is declared with V8 10.9's exact signature (include/v8-initialization.h).
#include <errno.h>
#include <stddef.h>
#include <sys/random.h>

namespace v8 {
class V8 {
 public:
  typedef bool (*EntropySource)(unsigned char* buffer, size_t length);
  static void SetEntropySource(EntropySource source);
};
}  // namespace v8

#include "entropy.h"

static volatile long seeds;  // how many seeds V8 asked for (tests read it)

static bool kernel_entropy(unsigned char* buffer, size_t length) {
  size_t done = 0;
  while (done < length) {
    ssize_t n = getrandom(buffer + done, length - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // V8 falls back to its own seed
    }
    done += static_cast<size_t>(n);
  }
  __atomic_add_fetch(&seeds, 1, __ATOMIC_RELAXED);
  return true;
}

extern "C" void retainer_entropy_install() { v8::V8::SetEntropySource(kernel_entropy); }

extern "C" long retainer_entropy_seeds() { return __atomic_load_n(&seeds, __ATOMIC_RELAXED); }
