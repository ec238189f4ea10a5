// slidedp: the command-line client of slidedpd. One command per run; the main thread
// does everything (unary calls with a deadline, WatchJob as a blocking stream read).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/format.h"
#include "client/spec_file.h"
#include "runtime/io/file_access.h"
#include "slidedp/v1/service.grpc.pb.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "slidedpd address: HOST:PORT or unix:/PATH");
ABSL_FLAG(std::string, output, "text", "text, or json (one JSON object per line) for scripts");
ABSL_FLAG(std::string, token_file, "", "File with the daemon's bearer token");
ABSL_FLAG(bool, tls, false, "Use TLS (system root certificates unless --tls_ca)");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificate(s) to verify the daemon; implies --tls");
ABSL_FLAG(int, timeout, 30, "Seconds to wait for each call (watch: for the stream to open)");
ABSL_FLAG(std::vector<std::string>, state, {}, "list: only jobs in these states (comma-separated)");
ABSL_FLAG(bool, replay, false, "watch: also print the events recorded before the watch started");
ABSL_FLAG(bool, candidates, false, "plan: also list every candidate plan the policy evaluated");

namespace {

namespace v1 = slidedp::v1;
using slidedp::client::IsTerminal;
using slidedp::client::StateName;

// Exit codes.
constexpr int kOk = 0;
constexpr int kError = 1;     // bad input, or the daemon refused / was unreachable
constexpr int kUsage = 2;
constexpr int kJobFailed = 3;
constexpr int kJobCancelled = 4;

constexpr const char* kUsageText =
    "slidedp: client of the slidedp training daemon.\n"
    "Usage: slidedp [--server=ADDR] [--output=json] COMMAND [ARGS]\n"
    "Commands:\n"
    "  submit FILE   queue the job FILE describes (YAML or JSON, the fields of slidedp-train);\n"
    "                prints the new job's id alone (text) or the job (json)\n"
    "  list          jobs in submission order (--state=running,queued to filter)\n"
    "  get ID        one job\n"
    "  watch ID      follow a job until it ends: exit 0 when it SUCCEEDED, 3 FAILED, 4 CANCELLED\n"
    "  pause ID      stop at the next step boundary, keeping the state\n"
    "  resume ID     continue a paused job\n"
    "  cancel ID     stop and discard a job\n"
    "  plan ID       the job's plan: knobs, predicted vs measured step time, each resource's\n"
    "                busy time, the bottleneck, memory vs budget (--candidates: the search)\n"
    "  node          the daemon's machine: CPUs, memory, GPUs, measured rates\n"
    "Exit codes: 0 ok, 1 error (with the daemon's message on stderr), 2 usage, 3 job\n"
    "FAILED, 4 job CANCELLED (watch).";

bool JsonOutput() { return absl::GetFlag(FLAGS_output) == "json"; }

int Fail(const std::string& message) {
  std::cerr << "slidedp: " << message << "\n";
  return kError;
}

// "NOT_FOUND: no job with id ..." with the daemon's message.
int FailRpc(const grpc::Status& status) {
  static constexpr const char* kCodes[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  const int code = static_cast<int>(status.error_code());
  const char* name = code >= 0 && code <= 16 ? kCodes[code] : "UNKNOWN";
  return Fail(absl::StrCat(name, ": ", status.error_message()));
}

class Client {
 public:
  static absl::StatusOr<Client> Connect();

  // A context with the deadline and the token.
  std::unique_ptr<grpc::ClientContext> Context(bool deadline = true) const {
    auto context = std::make_unique<grpc::ClientContext>();
    if (deadline) {
      context->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(absl::GetFlag(FLAGS_timeout)));
    }
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
    return context;
  }
  v1::TrainingService::Stub& stub() const { return *stub_; }

 private:
  std::shared_ptr<v1::TrainingService::Stub> stub_;
  std::string token_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag) {
  // Never blocks on a FIFO or a device; regular files of at most 1 MiB.
  absl::StatusOr<std::string> text = slidedp::ReadRegularFile(path, size_t{1} << 20);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat(flag, ": ", text.status().message()));
  return text;
}

absl::StatusOr<Client> Client::Connect() {
  Client client;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  if (absl::GetFlag(FLAGS_tls) || !ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ca.empty()) {
      absl::StatusOr<std::string> pem = ReadFile(ca, "--tls_ca");
      if (!pem.ok()) return pem.status();
      ssl.pem_root_certs = *pem;
    }
    credentials = grpc::SslCredentials(ssl);
  }
  if (const std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    absl::StatusOr<std::string> token = ReadFile(file, "--token_file");
    if (!token.ok()) return token.status();
    client.token_ = std::string(absl::StripAsciiWhitespace(*token));
  }
  client.stub_ = v1::TrainingService::NewStub(
      grpc::CreateChannel(absl::GetFlag(FLAGS_server), credentials));
  return client;
}

void PrintJob(const v1::Job& job) {
  if (JsonOutput()) {
    std::cout << slidedp::client::ToJson(job) << "\n";
  } else {
    std::cout << slidedp::client::FormatJobSummary(job) << "\n";
  }
}

int Submit(const Client& client, const std::string& file) {
  absl::StatusOr<v1::JobSpec> spec = slidedp::client::LoadJobSpec(file);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  v1::Job job;
  grpc::Status status = client.stub().SubmitJob(client.Context().get(), request, &job);
  if (!status.ok()) return FailRpc(status);
  if (JsonOutput()) {
    std::cout << slidedp::client::ToJson(job) << "\n";
  } else {
    std::cout << job.id() << "\n";
  }
  return kOk;
}

int List(const Client& client) {
  v1::ListJobsRequest request;
  for (const std::string& name : absl::GetFlag(FLAGS_state)) {
    const v1::JobState state = slidedp::client::ParseState(name);
    if (state == v1::JOB_STATE_UNSPECIFIED) return Fail(absl::StrCat("--state: unknown state \"", name, "\""));
    request.add_states(state);
  }
  request.set_page_size(1000);
  v1::ListJobsResponse all;
  do {
    v1::ListJobsResponse page;
    grpc::Status status = client.stub().ListJobs(client.Context().get(), request, &page);
    if (!status.ok()) return FailRpc(status);
    for (const v1::Job& job : page.jobs()) *all.add_jobs() = job;
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  std::cout << (JsonOutput() ? slidedp::client::ToJson(all) + "\n" : slidedp::client::FormatJobTable(all));
  return kOk;
}

template <typename Request, typename Call>
int JobCall(const std::string& id, Call call, bool detail) {
  Request request;
  request.set_id(id);
  v1::Job job;
  grpc::Status status = call(request, &job);
  if (!status.ok()) return FailRpc(status);
  if (detail && !JsonOutput()) {
    std::cout << slidedp::client::FormatJobDetail(job);
  } else {
    PrintJob(job);
  }
  return kOk;
}

int ExitCodeFor(v1::JobState state) {
  if (state == v1::JOB_STATE_SUCCEEDED) return kOk;
  if (state == v1::JOB_STATE_CANCELLED) return kJobCancelled;
  return kJobFailed;
}

// Text mode: a live line on a terminal (redrawn), otherwise one line per event.
void ShowEvent(const v1::JobEvent& event, slidedp::client::ProgressLine& line, bool tty) {
  if (JsonOutput()) {
    std::cout << slidedp::client::ToJson(event) << std::endl;
    return;
  }
  const std::string text = line.Render(event);
  const bool state_change = event.type() != v1::JobEvent::TYPE_STEP;
  if (tty) {
    std::cout << "\r\33[2K" << text << (state_change && !event.message().empty() ? "  " + event.message() : "");
    if (state_change && IsTerminal(event.job().state())) std::cout << "\n";
    std::cout << std::flush;
  } else {
    std::cout << text << (event.message().empty() ? "" : "  " + event.message()) << "\n" << std::flush;
  }
}

int Watch(const Client& client, const std::string& id) {
  v1::WatchJobRequest request;
  request.set_id(id);
  request.set_replay(absl::GetFlag(FLAGS_replay));
  std::unique_ptr<grpc::ClientContext> context = client.Context(/*deadline=*/false);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = client.stub().WatchJob(context.get(), request);
  slidedp::client::ProgressLine line;
  const bool tty = isatty(STDOUT_FILENO) == 1;
  v1::JobEvent event;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  std::string error;
  while (reader->Read(&event)) {
    ShowEvent(event, line, tty);
    state = event.job().state();
    error = event.job().error();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FailRpc(status);
  if (!IsTerminal(state)) return Fail("the watch ended before the job did");
  if (state == v1::JOB_STATE_FAILED && !JsonOutput()) std::cerr << "slidedp: job failed: " << error << "\n";
  return ExitCodeFor(state);
}

int Node(const Client& client) {
  v1::NodeInfo node;
  grpc::Status status = client.stub().GetNode(client.Context().get(), v1::GetNodeRequest(), &node);
  if (!status.ok()) return FailRpc(status);
  std::cout << (JsonOutput() ? slidedp::client::ToJson(node) + "\n" : slidedp::client::FormatNode(node));
  return kOk;
}

int Plan(const Client& client, const std::string& id) {
  v1::GetPlanRequest request;
  request.set_id(id);
  request.set_include_candidates(absl::GetFlag(FLAGS_candidates));
  v1::Plan plan;
  grpc::Status status = client.stub().GetPlan(client.Context().get(), request, &plan);
  if (!status.ok()) return FailRpc(status);
  std::cout << (JsonOutput() ? slidedp::client::ToJson(plan) + "\n" : slidedp::client::FormatPlan(plan));
  return kOk;
}

int Run(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kUsageText << "\n";
    return kUsage;
  }
  const std::string& command = args[0];
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "text" && output != "json") return Fail("--output must be text or json");
  const size_t want = (command == "list" || command == "node") ? 1 : 2;
  if (args.size() != want) {
    std::cerr << "slidedp: " << command << ": expected " << (want == 1 ? "no argument" : "one argument")
              << "\n" << kUsageText << "\n";
    return kUsage;
  }
  absl::StatusOr<Client> client = Client::Connect();
  if (!client.ok()) return Fail(std::string(client.status().message()));
  const Client& c = *client;
  auto& stub = c.stub();
  if (command == "submit") return Submit(c, args[1]);
  if (command == "list") return List(c);
  if (command == "node") return Node(c);
  if (command == "watch") return Watch(c, args[1]);
  if (command == "plan") return Plan(c, args[1]);
  if (command == "get") {
    return JobCall<v1::GetJobRequest>(args[1], [&](const auto& r, v1::Job* j) {
      return stub.GetJob(c.Context().get(), r, j); }, /*detail=*/true);
  }
  if (command == "pause") {
    return JobCall<v1::PauseJobRequest>(args[1], [&](const auto& r, v1::Job* j) {
      return stub.PauseJob(c.Context().get(), r, j); }, false);
  }
  if (command == "resume") {
    return JobCall<v1::ResumeJobRequest>(args[1], [&](const auto& r, v1::Job* j) {
      return stub.ResumeJob(c.Context().get(), r, j); }, false);
  }
  if (command == "cancel") {
    return JobCall<v1::CancelJobRequest>(args[1], [&](const auto& r, v1::Job* j) {
      return stub.CancelJob(c.Context().get(), r, j); }, false);
  }
  std::cerr << "slidedp: unknown command \"" << command << "\"\n" << kUsageText << "\n";
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsageText);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  return Run(args);
}
