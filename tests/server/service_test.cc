// The gRPC surface, in process: the Daemon with a FakeTrainer factory on a unix socket.
// Status codes per the contract, bearer tokens, WatchJob streams, oversized and
// unknown-field requests, the daemon staying up through all of it.
#include "server/service.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include <filesystem>
#include <thread>

#include "server/daemon.h"
#include "slidedp/v1/service.grpc.pb.h"
#include "tests/server/fake_trainer.h"
#include "tests/server/test_util.h"

namespace slidedp::server {
namespace {

namespace fs = std::filesystem;
using testing::FakeControl;
using testing::TempDir;
using namespace std::chrono_literals;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_.Join("data"));
    fs::create_directories(dir_.Join("secret"));
    fs::create_directories(dir_.Join("out"));
    testing::WriteFile(dir_.Join("data/t.bin"), std::string(4096, '\1'));
    testing::WriteFile(dir_.Join("secret/t.bin"), std::string(4096, '\1'));
    fs::create_symlink(dir_.Join("secret"), dir_.Join("data/link"));
  }
  void TearDown() override {
    control_->Allow(INT64_MAX);
    daemon_.reset();
  }

  void Start(const std::string& token = "") {
    DaemonOptions options;
    options.listen = "unix:" + dir_.Join("d.sock");
    options.metrics_listen = "127.0.0.1:0";
    options.state_dir = dir_.Join("state");
    options.roots.data = {dir_.Join("data")};
    options.roots.output = {dir_.Join("out")};
    if (!token.empty()) {
      testing::WriteFile(dir_.Join("token"), token + "\n");
      options.token_file = dir_.Join("token");
    }
    options.trainer_factory = testing::FakeFactory(control_);
    options.version = "test";
    auto daemon = Daemon::Start(std::move(options));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    stub_ = v1::TrainingService::NewStub(
        grpc::CreateChannel(daemon_->listen_address(), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + 10s);
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    return context;
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::Job* job, const std::string& token = "") {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    return stub_->SubmitJob(Context(token).get(), request, job);
  }

  v1::JobSpec Small(int64_t steps) {
    v1::JobSpec spec;
    spec.set_steps(steps);
    spec.set_seq_len(8);
    return spec;
  }

  // Reads the WatchJob stream to its end; returns the events and sets *status.
  std::vector<v1::JobEvent> Watch(const std::string& id, grpc::Status* status) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = stub_->WatchJob(&context, request);
    std::vector<v1::JobEvent> events;
    v1::JobEvent event;
    while (reader->Read(&event)) events.push_back(event);
    *status = reader->Finish();
    return events;
  }

  void ExpectAlive() {
    v1::NodeInfo node;
    grpc::Status s = stub_->GetNode(Context().get(), v1::GetNodeRequest(), &node);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(node.daemon_version(), "test");
  }

  TempDir dir_;
  std::shared_ptr<FakeControl> control_ = std::make_shared<FakeControl>();
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

TEST_F(ServiceTest, SubmitResolvesTheSpecAndWatchFollowsToSucceeded) {
  Start();
  v1::Job job;
  ASSERT_TRUE(Submit(Small(5), &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(job.spec().has_micro_batch_size()) << "defaults are filled in";
  EXPECT_EQ(job.spec().micro_batch_size(), TrainConfig().micro_batch_size);
  grpc::Status status;
  std::vector<v1::JobEvent> events = Watch(job.id(), &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().type(), v1::JobEvent::TYPE_SNAPSHOT);
  EXPECT_EQ(events.back().job().state(), v1::JOB_STATE_SUCCEEDED);
  int steps = 0;
  for (const v1::JobEvent& e : events) steps += e.type() == v1::JobEvent::TYPE_STEP;
  EXPECT_LE(steps, 5);
  v1::GetJobRequest get;
  get.set_id(job.id());
  v1::Job got;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(got.weights_digest().empty());
  // Watching a finished job: its snapshot, then the end of the stream.
  events = Watch(job.id(), &status);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job().state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(ServiceTest, ErrorsCarryTheContractsCodesAndNameTheField) {
  Start();
  v1::Job job;
  v1::JobSpec bad = Small(5);
  bad.set_seq_len(-3);
  grpc::Status s = Submit(bad, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("seq_len"), std::string::npos) << s.error_message();

  v1::JobSpec outside = Small(5);
  outside.mutable_data()->set_format("tokens");
  outside.mutable_data()->set_path(dir_.Join("data/../secret/t.bin"));
  s = Submit(outside, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  outside.mutable_data()->set_path(dir_.Join("data/link/t.bin"));
  s = Submit(outside, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  outside.mutable_data()->set_path(dir_.Join("data/missing.bin"));
  s = Submit(outside, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("does not exist"), std::string::npos);

  v1::GetJobRequest get;
  get.set_id("job-unknown");
  s = stub_->GetJob(Context().get(), get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  get.set_id(std::string(100000, 'x'));
  s = stub_->GetJob(Context().get(), get, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::Status watch;
  Watch("job-unknown", &watch);
  EXPECT_EQ(watch.error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(Submit(Small(1), &job).ok());
  ASSERT_TRUE(testing::WaitFor([&] {
    v1::GetJobRequest r;
    r.set_id(job.id());
    v1::Job j;
    return stub_->GetJob(Context().get(), r, &j).ok() && j.state() == v1::JOB_STATE_SUCCEEDED;
  }, 10s));
  v1::PauseJobRequest pause;
  pause.set_id(job.id());
  s = stub_->PauseJob(Context().get(), pause, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  v1::ListJobsRequest list;
  list.add_states(static_cast<v1::JobState>(42));
  v1::ListJobsResponse listed;
  EXPECT_EQ(stub_->ListJobs(Context().get(), list, &listed).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectAlive();
}

TEST_F(ServiceTest, OversizedAndUnknownFieldRequestsAreRefusedAndTheDaemonStaysUp) {
  Start();
  v1::Job job;
  v1::JobSpec huge = Small(1);
  huge.set_model(std::string(8 << 20, 'm'));
  grpc::Status s = Submit(huge, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  v1::JobSpec long_string = Small(1);
  long_string.set_output_dir("/" + std::string(100000, 'o'));
  s = Submit(long_string, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("output_dir"), std::string::npos) << s.error_message();
  v1::JobSpec unknown = Small(1);
  unknown.GetReflection()->MutableUnknownFields(&unknown)->AddLengthDelimited(1000, "future");
  s = Submit(unknown, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("unknown field number 1000"), std::string::npos) << s.error_message();
  ExpectAlive();
}

// Issue 18, case 1: a job failing with the raw bytes of a data file in its message
// (\xff\xfe is not UTF-8) broke GetJob and ListJobs for every client, and the restart.
TEST_F(ServiceTest, JobErrorsWithInvalidUtf8KeepTheApiAndTheRestartWorking) {
  {
    absl::MutexLock lock(&control_->mu);
    control_->fail_at_step = 2;
    control_->fail_message = "data.jsonl:1: not JSON: \xff\xfe[1,2,3]";
  }
  Start();
  v1::Job job;
  ASSERT_TRUE(Submit(Small(5), &job).ok());
  const std::string escaped = "data.jsonl:1: not JSON: \\xFF\\xFE[1,2,3]";
  auto get = [&](v1::Job* out) {
    v1::GetJobRequest request;
    request.set_id(job.id());
    return stub_->GetJob(Context().get(), request, out);
  };
  v1::Job got;
  ASSERT_TRUE(testing::WaitFor([&] { return get(&got).ok() && got.state() == v1::JOB_STATE_FAILED; }, 10s))
      << get(&got).error_message();
  EXPECT_NE(got.error().find(escaped), std::string::npos) << got.error();
  v1::ListJobsResponse listed;
  grpc::Status s = stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &listed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_NE(listed.jobs(0).error().find(escaped), std::string::npos);
  grpc::Status watch;
  std::vector<v1::JobEvent> events = Watch(job.id(), &watch);
  ASSERT_TRUE(watch.ok()) << watch.error_message();
  ASSERT_FALSE(events.empty());

  daemon_.reset();
  Start();  // the same state directory
  ASSERT_TRUE(get(&got).ok());
  EXPECT_EQ(got.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(got.error().find(escaped), std::string::npos) << got.error();
  s = stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &listed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectAlive();
}

TEST_F(ServiceTest, BearerTokenIsRequiredWhenConfigured) {
  Start("s3cret");
  v1::Job job;
  EXPECT_EQ(Submit(Small(1), &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit(Small(1), &job, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::NodeInfo node;
  EXPECT_EQ(stub_->GetNode(Context().get(), v1::GetNodeRequest(), &node).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status watch;
  Watch("job-x", &watch);
  EXPECT_EQ(watch.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Submit(Small(1), &job, "s3cret").ok());
}

// A wrong or missing token reveals nothing and changes nothing: every RPC that names
// or lists jobs is UNAUTHENTICATED with an empty response, no event is streamed, the
// message names no job, and the job is untouched. Tokens that merely share a prefix
// with the real one are wrong too.
TEST_F(ServiceTest, WrongOrMissingTokenLeaksNoJobDataAndChangesNothing) {
  control_->Allow(2);  // the job stays RUNNING at step 2 while we probe
  Start("s3cret");
  v1::Job job;
  ASSERT_TRUE(Submit(Small(5), &job, "s3cret").ok());
  const std::string id = job.id();
  for (const std::string token : {"", "wrong", "s3cre", "s3cretX", "S3CRET"}) {
    SCOPED_TRACE("token '" + token + "'");
    v1::GetJobRequest get;
    get.set_id(id);
    v1::Job got;
    grpc::Status s = stub_->GetJob(Context(token).get(), get, &got);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(s.error_message().find(id), std::string::npos) << s.error_message();
    EXPECT_TRUE(got.id().empty() && got.spec().model().empty());
    v1::ListJobsResponse list;
    s = stub_->ListJobs(Context(token).get(), v1::ListJobsRequest(), &list);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(list.jobs_size(), 0);
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + 10s);
      if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
      v1::WatchJobRequest watch;
      watch.set_id(id);
      watch.set_replay(true);
      auto reader = stub_->WatchJob(&context, watch);
      v1::JobEvent event;
      int events = 0;
      while (reader->Read(&event)) ++events;
      EXPECT_EQ(events, 0) << "no event may reach a client without the token";
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    }
    v1::PauseJobRequest pause;
    pause.set_id(id);
    EXPECT_EQ(stub_->PauseJob(Context(token).get(), pause, &got).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::CancelJobRequest cancel;
    cancel.set_id(id);
    EXPECT_EQ(stub_->CancelJob(Context(token).get(), cancel, &got).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::GetJobRequest get;
  get.set_id(id);
  v1::Job now;
  ASSERT_TRUE(stub_->GetJob(Context("s3cret").get(), get, &now).ok());
  EXPECT_FALSE(now.pause_requested());
  EXPECT_FALSE(now.cancel_requested());
  EXPECT_NE(now.state(), v1::JOB_STATE_CANCELLED);
  control_->Allow(INT64_MAX);
}

TEST_F(ServiceTest, ManyWatchersAndCancelledWatchers) {
  Start();
  control_->Allow(0);
  v1::Job job;
  ASSERT_TRUE(Submit(Small(20), &job).ok());
  // A watcher that goes away mid-stream must not disturb the daemon.
  {
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_id(job.id());
    auto reader = stub_->WatchJob(&context, request);
    v1::JobEvent event;
    ASSERT_TRUE(reader->Read(&event));
    context.TryCancel();
    while (reader->Read(&event)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  std::vector<std::thread> watchers;
  std::atomic<int> succeeded{0};
  for (int i = 0; i < 8; ++i) {
    watchers.emplace_back([&] {
      grpc::Status status;
      std::vector<v1::JobEvent> events = Watch(job.id(), &status);
      if (status.ok() && !events.empty() && events.back().job().state() == v1::JOB_STATE_SUCCEEDED) {
        ++succeeded;
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  control_->Allow(INT64_MAX);
  for (std::thread& t : watchers) t.join();
  EXPECT_EQ(succeeded.load(), 8);
  ExpectAlive();
}

// Issue 18 class: the metrics endpoint keeps answering while gRPC clients are busy or
// many (8 threads calling without pause, 16 open WatchJob streams) and 64 connections to
// the metrics port sit idle.
TEST_F(ServiceTest, MetricsAnswerWhileGrpcAndHttpClientsAreBusy) {
  Start();
  control_->Allow(0);
  v1::Job job;
  ASSERT_TRUE(Submit(Small(20), &job).ok());
  const std::string address = daemon_->metrics_address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      while (!stop) {
        v1::ListJobsResponse listed;
        (void)stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &listed);
        v1::NodeInfo node;
        (void)stub_->GetNode(Context().get(), v1::GetNodeRequest(), &node);
      }
    });
  }
  std::vector<std::unique_ptr<grpc::ClientContext>> watch_contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> watches;
  for (int i = 0; i < 16; ++i) {
    watch_contexts.push_back(std::make_unique<grpc::ClientContext>());
    v1::WatchJobRequest request;
    request.set_id(job.id());
    watches.push_back(stub_->WatchJob(watch_contexts.back().get(), request));
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto response = client.Get("/metrics");
    ASSERT_TRUE(response) << "scrape " << i;
    EXPECT_EQ(response->status, 200);
    EXPECT_NE(response->body.find("slidedp_"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  stop = true;
  for (std::thread& t : clients) t.join();
  for (auto& context : watch_contexts) context->TryCancel();
  for (auto& reader : watches) {
    v1::JobEvent event;
    while (reader->Read(&event)) {
    }
    (void)reader->Finish();
  }
  for (int fd : idle) close(fd);
  control_->Allow(INT64_MAX);
  ExpectAlive();
}

TEST_F(ServiceTest, PauseResumeCancelOverGrpc) {
  Start();
  control_->Allow(2);
  v1::Job job;
  ASSERT_TRUE(Submit(Small(10), &job).ok());
  auto state = [&] {
    v1::GetJobRequest r;
    r.set_id(job.id());
    v1::Job j;
    stub_->GetJob(Context().get(), r, &j);
    return j;
  };
  ASSERT_TRUE(testing::WaitFor([&] { return state().step() == 2; }, 10s));
  v1::PauseJobRequest pause;
  pause.set_id(job.id());
  v1::Job out;
  ASSERT_TRUE(stub_->PauseJob(Context().get(), pause, &out).ok());
  EXPECT_TRUE(out.pause_requested());
  control_->Allow(INT64_MAX);
  ASSERT_TRUE(testing::WaitFor([&] { return state().state() == v1::JOB_STATE_PAUSED; }, 10s));
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  ASSERT_TRUE(stub_->CancelJob(Context().get(), cancel, &out).ok());
  EXPECT_EQ(out.state(), v1::JOB_STATE_CANCELLED);
  v1::ResumeJobRequest resume;
  resume.set_id(job.id());
  EXPECT_EQ(stub_->ResumeJob(Context().get(), resume, &out).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServiceTest, GetPlanShowsPredictedAgainstMeasured) {
  Start();
  v1::GetPlanRequest request;
  request.set_id("job-nope");
  v1::Plan plan;
  EXPECT_EQ(stub_->GetPlan(Context().get(), request, &plan).error_code(), grpc::StatusCode::NOT_FOUND);
  control_->Allow(0);
  v1::Job first, second;
  ASSERT_TRUE(Submit(Small(10), &first).ok());
  ASSERT_TRUE(Submit(Small(10), &second).ok());
  // Queued behind the first: no trainer, no plan yet.
  request.set_id(second.id());
  EXPECT_EQ(stub_->GetPlan(Context().get(), request, &plan).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  control_->Allow(2);
  request.set_id(first.id());
  ASSERT_TRUE(testing::WaitFor([&] {
    return stub_->GetPlan(Context().get(), request, &plan).ok() && plan.step() == 2;
  }, 10s));
  EXPECT_EQ(plan.job_id(), first.id());
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds(), 0.002);
  EXPECT_DOUBLE_EQ(plan.measured_step_seconds(), 0.001);
  EXPECT_EQ(plan.bottleneck(), "gpu");
  EXPECT_EQ(plan.knobs().micro_batch_size(), TrainConfig().micro_batch_size);
  EXPECT_EQ(plan.knobs().kept_blocks(), 1);
  EXPECT_EQ(plan.knobs().blocks(), 2);
  EXPECT_EQ(plan.knobs().resident_units(), 1);
  EXPECT_EQ(plan.knobs().units(), 4);
  EXPECT_EQ(plan.knobs().resident_bytes(), 1 << 20);
  EXPECT_EQ(plan.busy_size(), 3);
  EXPECT_EQ(plan.critical_path_size(), 2);
  EXPECT_EQ(plan.memory().total_bytes(), 3 << 20);
  EXPECT_EQ(plan.memory_budget_bytes(), 8 << 20);
  EXPECT_DOUBLE_EQ(plan.rates().gpu_update_params_per_second(), 1.5e11);
  EXPECT_DOUBLE_EQ(plan.rates().cross_host_gbps(), 12.5);
  EXPECT_DOUBLE_EQ(plan.rates().cross_host_latency_seconds(), 2e-4);
  EXPECT_EQ(plan.candidate_count(), 2);
  EXPECT_EQ(plan.candidates_size(), 0);
  request.set_include_candidates(true);
  ASSERT_TRUE(stub_->GetPlan(Context().get(), request, &plan).ok());
  ASSERT_EQ(plan.candidates_size(), 2);
  EXPECT_EQ(plan.candidates(1).knobs().resident_units(), 1);
  EXPECT_EQ(plan.candidates(1).knobs().units(), 4);
  EXPECT_EQ(plan.candidates(1).knobs().resident_bytes(), 1 << 20);
  EXPECT_TRUE(plan.candidates(0).chosen());
  EXPECT_FALSE(plan.candidates(1).chosen());
  control_->Allow(INT64_MAX);
}

TEST(DaemonOptionsTest, RefusesNonLoopbackWithoutTlsAndBadFlags) {
  TempDir dir;
  DaemonOptions options;
  options.listen = "0.0.0.0:0";
  options.metrics_listen = "";
  options.state_dir = dir.Join("state");
  options.trainer_factory = testing::FakeFactory(std::make_shared<FakeControl>());
  auto refused = Daemon::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--allow_insecure_remote"), absl::string_view::npos);
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "0.0.0.0:0";
  EXPECT_FALSE(Daemon::Start(options).ok());
  options.metrics_listen = "";
  options.state_dir = "";
  EXPECT_FALSE(Daemon::Start(options).ok());
  options.state_dir = dir.Join("state");
  options.tls_cert_file = dir.Join("cert.pem");
  EXPECT_FALSE(Daemon::Start(options).ok()) << "--tls_cert without --tls_key";
  options.tls_cert_file.clear();
  options.token_file = dir.Join("missing-token");
  EXPECT_FALSE(Daemon::Start(options).ok());
  testing::WriteFile(dir.Join("empty-token"), " \n");
  options.token_file = dir.Join("empty-token");
  EXPECT_FALSE(Daemon::Start(options).ok());
  options.token_file.clear();
  options.roots.model = {dir.Join("no-such-root")};
  EXPECT_FALSE(Daemon::Start(options).ok());
}

}  // namespace
}  // namespace slidedp::server
