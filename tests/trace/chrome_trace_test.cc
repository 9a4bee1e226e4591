// The Chrome trace: named tracks, compute and communication of each rank on separate tracks,
// complete events with times scaled to microseconds.
#include "dtrain/trace/chrome_trace.h"

#include <gtest/gtest.h>

#include <string>

namespace dtrain::trace {
namespace {

TEST(ChromeTrace, TracksPerRank) {
  Timeline t;
  t.rows.push_back({"rank 0",
                    {{"F0", SpanKind::forward, 0, 0, 0, 1},
                     {"send_activation(mb 0, chunk 0) -> rank 1", SpanKind::send, 0, 0, 1, 1.5}}});
  t.rows.push_back(
      {"rank 1",
       {{"F0", SpanKind::forward, 0, 0, 1.5, 2.5},
        {"ring K/V hop (forward)", SpanKind::context_parallel, -1, -1, 1.5, 2, 4096}}});
  ChromeTraceOptions o;
  o.us_per_time_unit = 10;
  // Round trip through text, as a viewer reads it.
  const nlohmann::json j = nlohmann::json::parse(chrome_trace(t, o).dump());
  const nlohmann::json& events = j.at("traceEvents");
  int metadata = 0, complete = 0;
  for (const nlohmann::json& e : events) {
    if (e.at("ph") == "M") {
      ++metadata;
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X");
    ++complete;
  }
  EXPECT_EQ(metadata, 1 + 8 * 2);  // process name; per rank four track names and four orders
  EXPECT_EQ(complete, 4);
  const nlohmann::json& send = events[static_cast<size_t>(metadata) + 1];
  EXPECT_EQ(send.at("cat"), "send");
  EXPECT_EQ(send.at("tid"), communication_track(0));
  EXPECT_DOUBLE_EQ(send.at("ts").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(send.at("dur").get<double>(), 5.0);
  const nlohmann::json& f1 = events[static_cast<size_t>(metadata) + 2];
  EXPECT_EQ(f1.at("tid"), compute_track(1));
  EXPECT_EQ(f1.at("name"), "F0");
  EXPECT_EQ(f1.at("args").at("microbatch"), 0);
  EXPECT_FALSE(f1.at("args").contains("bytes"));  // not measured for compute
  const nlohmann::json& hop = events[static_cast<size_t>(metadata) + 3];
  EXPECT_EQ(hop.at("tid"), context_parallel_track(1));
  EXPECT_EQ(hop.at("cat"), "context_parallel");
  EXPECT_EQ(hop.at("args").at("bytes"), 4096);
  EXPECT_EQ(events[1].at("args").at("name"), "rank 0 compute");
  EXPECT_EQ(events[2].at("args").at("name"), "rank 0 comm");
  EXPECT_EQ(events[5].at("args").at("name"), "rank 0 comm thread");
  EXPECT_EQ(events[7].at("args").at("name"), "rank 0 cp");
  EXPECT_EQ(events[7].at("tid"), context_parallel_track(0));
}

}  // namespace
}  // namespace dtrain::trace
