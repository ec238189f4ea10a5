// Build-time probe (runtime/CMakeLists.txt, check_cxx_source_compiles): every c10d call
// of host_group.cc, so that a LibTorch whose c10d API or gloo headers differ builds
// without several hosts (jobs of several hosts refused) instead of failing the build.
// Never linked.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

int main() {
  const std::chrono::milliseconds t(1000);
  c10d::TCPStoreOptions so;
  so.port = 1;
  so.isServer = true;
  so.numWorkers = 2;
  so.waitWorkers = true;
  so.timeout = t;
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("p", store);
  auto options = c10d::ProcessGroupGloo::Options::create(t);
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 2;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, 0, 2, options);
  at::Tensor a = at::empty({4});
  std::vector<at::Tensor> v{a};
  pg->send(v, 1, /*tag=*/0)->wait(t);
  pg->recv(v, 1, /*tag=*/0)->wait(t);
  c10d::BroadcastOptions b;
  b.rootRank = 1;
  pg->broadcast(v, b)->wait(t);
  pg->allreduce(v)->wait(t);
  pg->barrier()->wait(t);
  return 0;
}
