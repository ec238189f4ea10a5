// StepTrace's file: Chrome trace events a viewer and tests/bench/trace_*.py read: one
// complete ("X") event per span on its process and named track, counters ("C") with
// their series, times in microseconds from the trace's origin.
#include "runtime/engine/step_trace.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/engine/clock.h"

namespace slidedp {
namespace {

TEST(StepTrace, WritesSpansOnTheirTracksAndCountersWithTheirSeries) {
  StepTrace trace;
  const double t = MonotonicSeconds();
  trace.Add(0, "compute", "forward block 3", t, t + 0.004);
  trace.Add(0, "h2d", "fetch block 4", t + 0.001, t + 0.002);
  trace.AddCounter(0, "gpu memory GiB", t + 0.004, {{"allocated", 12.5}, {"peak", 20.25}});
  trace.Add(StepTrace::kHostPid, "update", "update block 2", t, t + 0.5);
  const std::string path = ::testing::TempDir() + "/step_trace_test.json";
  ASSERT_TRUE(trace.Write(path).ok());

  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::map<std::pair<int, int>, std::string> tracks;  // (pid, tid) -> thread name
  int spans = 0, counters = 0;
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
  }
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++spans;
      if (e.at("name") == "forward block 3") {
        EXPECT_EQ(tracks.at({e.at("pid"), e.at("tid")}), "compute");
        EXPECT_NEAR(e.at("dur").get<double>(), 4000.0, 1e-3);
      }
      if (e.at("name") == "update block 2") EXPECT_EQ(e.at("pid").get<int>(), StepTrace::kHostPid);
    } else if (e.at("ph") == "C") {
      ++counters;
      EXPECT_EQ(e.at("name"), "gpu memory GiB");
      EXPECT_EQ(e.at("pid").get<int>(), 0);
      EXPECT_DOUBLE_EQ(e.at("args").at("allocated").get<double>(), 12.5);
      EXPECT_DOUBLE_EQ(e.at("args").at("peak").get<double>(), 20.25);
      // At the compute span's end: 4 ms after the first span's start.
      double first = 1e300;
      for (const nlohmann::json& x : doc.at("traceEvents")) {
        if (x.at("ph") == "X") first = std::min(first, x.at("ts").get<double>());
      }
      EXPECT_NEAR(e.at("ts").get<double>() - first, 4000.0, 1e-3);
    }
  }
  EXPECT_EQ(spans, 3);
  EXPECT_EQ(counters, 1);
  EXPECT_EQ(trace.size(), 3u);
}

}  // namespace
}  // namespace slidedp
