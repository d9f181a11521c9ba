// The flight recorder's ring: numbering per communicator and per peer, wrap-around, the dump.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/flight_recorder.hpp"
#include "core/timer.hpp"

using namespace trident;

namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace

TEST(FlightRecorder, KeepsTheNewestOperationsNumberedPerCommunicatorAndPeer) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("trident_flight_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  FlightRecorder& recorder = FlightRecorder::instance();
  const int tp = recorder.add_communicator("tp", {2, 3});
  const int pp = recorder.add_communicator("pp", {3, 7});
  PhaseTimer timer;
  std::atomic<int> step{5};
  recorder.start(6, 3, "node1", (dir / "rank_00003.jsonl").string(), &timer, &step);
  auto complete = [&](int comm, const char* op, uint64_t bytes, int peer) {
    const RecordedCall done(recorder.issue(comm, op, bytes, peer));
  };
  for (int i = 0; i < 3; ++i) complete(tp, "allreduce_sum", 64, -1);
  complete(pp, "send", 8, 1);
  complete(pp, "send", 8, 1);
  complete(pp, "recv", 8, 1);
  timer.push(Phase::kTpComm);
  const uint64_t pending = recorder.issue(tp, "iallreduce_sum", 128);  // never completed
  EXPECT_NE(pending, 0u);
  ASSERT_TRUE(recorder.dump("test"));
  recorder.stop();

  const std::vector<nlohmann::json> lines = read_lines((dir / "rank_00003.jsonl").string());
  ASSERT_EQ(lines.size(), 7u);  // the header and the newest 6 of 7 operations
  const nlohmann::json& header = lines[0];
  EXPECT_EQ(header["rank"], 3);
  EXPECT_EQ(header["host"], "node1");
  EXPECT_EQ(header["reason"], "test");
  EXPECT_EQ(header["step"], 5);
  EXPECT_EQ(header["phase"], "tp_comm");
  EXPECT_EQ(header["comms"][tp]["axis"], "tp");
  EXPECT_EQ(header["comms"][pp]["members"], (std::vector<int>{3, 7}));
  EXPECT_EQ(lines[1]["id"], 2);  // the first was overwritten
  EXPECT_EQ(lines[1]["seq"], 2);
  EXPECT_EQ(lines[3]["op"], "send");
  EXPECT_EQ(lines[4]["seq"], 2);  // the second send to peer 1
  EXPECT_EQ(lines[5]["seq"], 1);  // the first receive from peer 1
  EXPECT_EQ(lines[5]["peer"], 1);
  EXPECT_EQ(lines[6]["op"], "iallreduce_sum");
  EXPECT_EQ(lines[6]["seq"], 4);
  EXPECT_EQ(lines[6]["phase"], "tp_comm");
  EXPECT_EQ(lines[6]["completed_us"], -1);
  EXPECT_GE(lines[5]["completed_us"].get<int64_t>(), lines[5]["issued_us"].get<int64_t>());
  std::filesystem::remove_all(dir);
}

TEST(FlightRecorder, OffRecordsNothingAndWritesNothing) {
  FlightRecorder& recorder = FlightRecorder::instance();
  const int comm = recorder.add_communicator("dp", {0});
  const auto path = std::filesystem::temp_directory_path() /
                    ("trident_flight_off_" + std::to_string(getpid())) / "rank_00000.jsonl";
  recorder.start(0, 0, "node1", path.string(), nullptr, nullptr);
  EXPECT_EQ(recorder.issue(comm, "allreduce_sum", 4), 0u);
  EXPECT_FALSE(recorder.dump("test"));
  EXPECT_FALSE(std::filesystem::exists(path.parent_path()));
  recorder.stop();
}
