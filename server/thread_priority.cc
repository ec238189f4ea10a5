// LowerCallingThreadPriority: see thread_priority.h. Linux applies setpriority(PRIO_PROCESS,
// tid) to one thread.
#include "server/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace slidedp::server {
namespace {

id_t ThreadId() { return static_cast<id_t>(syscall(SYS_gettid)); }

}  // namespace

void LowerCallingThreadPriority(int nice) {
  thread_local bool lowered = false;
  if (lowered || nice <= 0) return;
  lowered = true;
  setpriority(PRIO_PROCESS, ThreadId(), CallingThreadNice() + nice);
}

int CallingThreadNice() {
  errno = 0;
  return getpriority(PRIO_PROCESS, ThreadId());
}

}  // namespace slidedp::server
