// LowerCallingThreadPriority: the control plane yields the CPU to training. gRPC's
// threads (which run every handler) call it as they enter a handler; the first call on a
// thread raises that thread's nice value by `nice`, later calls do nothing. The job's
// threads (steps, CPU updates) keep the process's priority, so a burst of client calls
// takes idle CPU rather than the training job's. Any thread; thread-local state only.
#pragma once

namespace slidedp::server {

// 0 or less: no change. Failure to change it (a sandbox that forbids setpriority) is
// ignored: priority is an optimization, not a contract.
void LowerCallingThreadPriority(int nice);

// The calling thread's nice value (for tests).
int CallingThreadNice();

}  // namespace slidedp::server
