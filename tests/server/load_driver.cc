// LoadDriver: see load_driver.h. One thread per client.
#include "tests/server/load_driver.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "slidedp/v1/service.grpc.pb.h"

namespace slidedp::server::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

struct ClientTally {
  int64_t get = 0, list = 0, watch = 0, submit = 0, errors = 0;
  std::string first_error;
  std::vector<double> get_ms, list_ms;
};

class Client {
 public:
  Client(const LoadOptions& o, int index) : o_(o) {
    grpc::ChannelArguments args;
    args.SetInt("slidedp.load_client", index);  // distinct args: a connection of its own
    stub_ = v1::TrainingService::NewStub(
        grpc::CreateCustomChannel(o.address, grpc::InsecureChannelCredentials(), args));
  }

  void Run(Clock::time_point end, ClientTally& t) {
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / o_.ticks_per_second));
    auto next = Clock::now();
    for (int64_t tick = 0; Clock::now() < end; ++tick) {
      Get(t);
      if (tick % 5 == 0) List(t);
      if (tick % 10 == 5) Watch(t);
      if (tick % 40 == 20) SubmitAndCancel(t);
      next += period;
      std::this_thread::sleep_until(next);
    }
  }

 private:
  // wait_for_ready: a connection attempt that fails once (a CI sandbox answered one of 50
  // simultaneous connects with a stray errno) is retried within the call's deadline, as a
  // real client would, instead of failing every call of that channel for a second of
  // reconnect backoff. The wait still counts in the call's latency, and a daemon that stops
  // accepting still fails the call (DEADLINE_EXCEEDED) and the test.
  void Prepare(grpc::ClientContext& c) const {
    c.set_wait_for_ready(true);
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!o_.token.empty()) c.AddMetadata("authorization", "Bearer " + o_.token);
  }
  static void Error(ClientTally& t, const grpc::Status& s, const char* what) {
    if (s.ok()) return;
    if (t.errors++ == 0) t.first_error = absl::StrFormat("%s: %d %s", what, s.error_code(), s.error_message());
  }
  void Get(ClientTally& t) {
    grpc::ClientContext c;
    Prepare(c);
    v1::GetJobRequest r;
    r.set_id(o_.job_id);
    v1::Job job;
    const auto t0 = Clock::now();
    grpc::Status s = stub_->GetJob(&c, r, &job);
    t.get_ms.push_back(Ms(Clock::now() - t0));
    ++t.get;
    Error(t, s, "GetJob");
  }
  void List(ClientTally& t) {
    grpc::ClientContext c;
    Prepare(c);
    v1::ListJobsRequest r;
    r.set_page_size(20);
    v1::ListJobsResponse resp;
    const auto t0 = Clock::now();
    grpc::Status s = stub_->ListJobs(&c, r, &resp);
    t.list_ms.push_back(Ms(Clock::now() - t0));
    ++t.list;
    Error(t, s, "ListJobs");
  }
  void Watch(ClientTally& t) {
    grpc::ClientContext c;
    Prepare(c);
    v1::WatchJobRequest r;
    r.set_id(o_.job_id);
    auto reader = stub_->WatchJob(&c, r);
    v1::JobEvent event;
    const bool got = reader->Read(&event);  // the snapshot
    c.TryCancel();
    grpc::Status s = reader->Finish();
    ++t.watch;
    if (!got) Error(t, s.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "no snapshot") : s, "WatchJob");
  }
  void SubmitAndCancel(ClientTally& t) {
    v1::SubmitJobRequest r;
    r.mutable_spec()->set_model("tiny");
    r.mutable_spec()->set_steps(1);
    r.mutable_spec()->set_seq_len(8);
    v1::Job job;
    {
      grpc::ClientContext c;
      Prepare(c);
      grpc::Status s = stub_->SubmitJob(&c, r, &job);
      ++t.submit;
      Error(t, s, "SubmitJob");
      if (!s.ok()) return;
    }
    grpc::ClientContext c;
    Prepare(c);
    v1::CancelJobRequest cancel;
    cancel.set_id(job.id());
    Error(t, stub_->CancelJob(&c, cancel, &job), "CancelJob");
  }

  const LoadOptions& o_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

}  // namespace

LoadResult RunLoad(const LoadOptions& options) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < options.clients; ++i) clients.push_back(std::make_unique<Client>(options, i));
  std::vector<ClientTally> tallies(options.clients);
  const auto start = Clock::now();
  const auto end = start + options.duration;
  std::vector<std::thread> threads;
  for (int i = 0; i < options.clients; ++i) {
    threads.emplace_back([&, i] { clients[i]->Run(end, tallies[i]); });
  }
  for (std::thread& t : threads) t.join();
  LoadResult r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> get_ms, list_ms;
  for (ClientTally& t : tallies) {
    r.get_calls += t.get;
    r.list_calls += t.list;
    r.watch_calls += t.watch;
    r.submit_calls += t.submit;
    if (r.errors == 0 && t.errors > 0) r.first_error = t.first_error;
    r.errors += t.errors;
    get_ms.insert(get_ms.end(), t.get_ms.begin(), t.get_ms.end());
    list_ms.insert(list_ms.end(), t.list_ms.begin(), t.list_ms.end());
  }
  r.get_p50_ms = Percentile(get_ms, 0.50);
  r.get_p99_ms = Percentile(get_ms, 0.99);
  r.get_max_ms = get_ms.empty() ? 0 : get_ms.back();
  r.list_p50_ms = Percentile(list_ms, 0.50);
  r.list_p99_ms = Percentile(list_ms, 0.99);
  return r;
}

std::string Describe(const LoadResult& r) {
  return absl::StrFormat(
      "%.1f s: GetJob %d calls p50 %.2f ms p99 %.2f ms max %.1f ms; ListJobs %d p50 %.2f p99 %.2f ms; "
      "WatchJob %d; SubmitJob+CancelJob %d; errors %d%s%s",
      r.seconds, r.get_calls, r.get_p50_ms, r.get_p99_ms, r.get_max_ms, r.list_calls, r.list_p50_ms,
      r.list_p99_ms, r.watch_calls, r.submit_calls, r.errors, r.errors ? ", first: " : "", r.first_error);
}

}  // namespace slidedp::server::testing
