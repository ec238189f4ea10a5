// daemon_load: the daemon under client load, and what the load costs the training job.
// Starts slidedpd, submits a long tiny job (1 update thread), then measures the job's
// step time in three windows of the same length on the same daemon and job: quiet,
// with N concurrent clients (load_driver.h: GetJob every tick, ListJobs, WatchJob,
// SubmitJob + CancelJob), quiet again; prints GetJob latency percentiles and the step
// time under load relative to the mean of the quiet windows. Step times come from one
// WatchJob stream that is open in all three windows (so it is no difference between them).
//   daemon_load SLIDEDPD [CLIENTS=50] [SECONDS=60] [TICKS_PER_SECOND=20]
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "slidedp/v1/service.grpc.pb.h"
#include "tests/server/load_driver.h"
#include "tests/server/subprocess.h"
#include "tests/server/test_util.h"

using namespace slidedp;
using namespace slidedp::server::testing;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: daemon_load SLIDEDPD [CLIENTS=50] [SECONDS=60] [TICKS_PER_SECOND=20]\n";
    return 2;
  }
  const int clients = argc > 2 ? std::atoi(argv[2]) : 50;
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 60;
  const double ticks = argc > 4 ? std::atof(argv[4]) : 20;
  TempDir dir;
  DaemonProcess daemon(argv[1], dir.Join("state"));
  if (!daemon.started()) {
    std::cerr << daemon.log();
    return 1;
  }
  auto stub = v1::TrainingService::NewStub(grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest submit;
  v1::JobSpec& spec = *submit.mutable_spec();
  spec.set_model("tiny");
  spec.set_seq_len(64);
  spec.set_micro_batch_size(4);
  spec.set_steps(10000000);
  spec.mutable_policy()->set_update_threads(1);
  v1::Job job;
  {
    grpc::ClientContext c;
    grpc::Status s = stub->SubmitJob(&c, submit, &job);
    if (!s.ok()) {
      std::cerr << "submit: " << s.error_message() << "\n";
      return 1;
    }
  }
  // Step events with their arrival time.
  std::mutex mu;
  std::vector<std::pair<Clock::time_point, double>> steps;
  grpc::ClientContext watch_context;
  std::thread watcher([&] {
    v1::WatchJobRequest r;
    r.set_id(job.id());
    auto reader = stub->WatchJob(&watch_context, r);
    v1::JobEvent e;
    while (reader->Read(&e)) {
      if (e.type() != v1::JobEvent::TYPE_STEP) continue;
      std::lock_guard<std::mutex> lock(mu);
      steps.emplace_back(Clock::now(), e.step().step_seconds());
    }
    reader->Finish();
  });
  auto mean_step = [&](Clock::time_point from, Clock::time_point to, int* n) {
    std::lock_guard<std::mutex> lock(mu);
    double sum = 0;
    *n = 0;
    for (auto& [t, s] : steps) {
      if (t >= from && t < to) sum += s, ++*n;
    }
    return *n ? sum / *n : 0.0;
  };
  WaitFor([&] { std::lock_guard<std::mutex> lock(mu); return steps.size() >= 3; }, std::chrono::seconds(120));
  const auto window = std::chrono::seconds(seconds);
  const auto q1 = Clock::now();
  std::this_thread::sleep_for(window);
  const auto l0 = Clock::now();
  LoadOptions o;
  o.address = daemon.address();
  o.job_id = job.id();
  o.clients = clients;
  o.duration = window;
  o.ticks_per_second = ticks;
  const LoadResult r = RunLoad(o);
  const auto l1 = Clock::now();
  std::this_thread::sleep_for(window);
  const auto q2 = Clock::now();
  int n1, nl, n2;
  const double quiet1 = mean_step(q1, l0, &n1), loaded = mean_step(l0, l1, &nl), quiet2 = mean_step(l1, q2, &n2);
  const double quiet = (quiet1 + quiet2) / 2;
  std::printf("clients %d, %.0f ticks/s each, windows of %d s\n", clients, ticks, seconds);
  std::printf("load: %s\n", Describe(r).c_str());
  std::printf("step time: quiet %.4f s (%d steps), under load %.4f s (%d steps), quiet again %.4f s (%d steps)\n",
              quiet1, n1, loaded, nl, quiet2, n2);
  std::printf("step time under load / quiet: %.3f (%+.1f%%)\n", loaded / quiet, 100 * (loaded / quiet - 1));
  watch_context.TryCancel();
  watcher.join();
  return 0;
}
