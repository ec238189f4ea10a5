// Child processes for the integration tests (posix_spawn, waitpid polling).
#include "tests/server/subprocess.h"

#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "nlohmann/json.hpp"
#include "tests/server/test_util.h"

extern char** environ;

namespace slidedp::server::testing {
namespace {

pid_t Spawn(const std::vector<std::string>& args, const std::string& out_path,
            const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Waits for `pid` up to `limit`: its exit code, or -2 when still running.
int WaitExit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& args, std::chrono::seconds limit) {
  TempDir dir;
  CommandResult result;
  const pid_t pid = Spawn(args, dir.Join("out"), dir.Join("err"));
  if (pid < 0) {
    result.err = "cannot spawn " + args[0];
    return result;
  }
  int code = WaitExit(pid, limit);
  if (code == -2) {
    kill(pid, SIGKILL);
    WaitExit(pid, std::chrono::seconds(10));
    code = -1;
  }
  result.exit_code = code;
  result.out = ReadFileOrEmpty(dir.Join("out"));
  result.err = ReadFileOrEmpty(dir.Join("err"));
  return result;
}

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::string& log_path) {
  pid_ = Spawn(args, log_path + ".out", log_path);
  spawned_ = pid_ > 0;
}

bool ChildProcess::running() {
  if (pid_ < 0) return false;
  const int code = WaitExit(pid_, std::chrono::milliseconds(0));
  if (code == -2) return true;
  exit_code_ = code;
  pid_ = -1;
  return false;
}

int ChildProcess::Stop(std::chrono::seconds limit) {
  if (!running()) return exit_code_;
  kill(pid_, SIGTERM);
  int code = WaitExit(pid_, limit);
  if (code == -2) {
    kill(pid_, SIGKILL);
    WaitExit(pid_, std::chrono::seconds(10));
    code = -1;
  }
  pid_ = -1;
  exit_code_ = code;
  return code;
}

void ChildProcess::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  WaitExit(pid_, std::chrono::seconds(10));
  pid_ = -1;
  exit_code_ = -1;
}

ChildProcess::~ChildProcess() { Stop(); }

DaemonProcess::DaemonProcess(const std::string& binary, const std::string& state_dir,
                             const std::vector<std::string>& extra, const std::string& listen) {
  const std::string ready = state_dir + ".ready.json";
  log_path_ = state_dir + ".log";
  unlink(ready.c_str());
  std::vector<std::string> args = {binary, "--listen=" + listen, "--metrics_listen=127.0.0.1:0",
                                   "--state_dir=" + state_dir, "--ready_file=" + ready};
  args.insert(args.end(), extra.begin(), extra.end());
  child_ = std::make_unique<ChildProcess>(args, log_path_);
  if (!child_->spawned()) return;
  const bool up = WaitFor([&] { return !ReadFileOrEmpty(ready).empty() || !running(); },
                          std::chrono::seconds(30));
  if (!up || !running()) return;
  nlohmann::json json = nlohmann::json::parse(ReadFileOrEmpty(ready), nullptr, false);
  if (json.is_discarded()) return;
  address_ = json.value("listen", "");
  metrics_address_ = json.value("metrics_listen", "");
}

int DaemonProcess::Stop(std::chrono::seconds limit) {
  address_.clear();
  return child_ ? child_->Stop(limit) : -1;
}

void DaemonProcess::Kill() {
  address_.clear();
  if (child_) child_->Kill();
}

DaemonProcess::~DaemonProcess() { Stop(); }

std::string DaemonProcess::log() const { return ReadFileOrEmpty(log_path_); }

}  // namespace slidedp::server::testing
