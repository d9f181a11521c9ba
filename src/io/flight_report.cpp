// Flight records merged: per communicator the first operation some member did not complete,
// whom it waits for, and the ranks at the root of the wait.
#include "io/flight_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace trident {

namespace fs = std::filesystem;

namespace {

struct Entry {
  uint64_t id;  // the rank's issue order
  int64_t seq;
  std::string op;
  uint64_t bytes;
  int peer;  // world rank; -1: a collective
  int step;
  std::string phase;
  int64_t issued_us, completed_us;
};

struct RankRecord {
  int rank = -1;
  std::string host, reason, phase;
  int step = 0;
  int64_t now_us = 0;
  // Per communicator ("tp [2, 3]"), this rank's entries, oldest first.
  std::map<std::string, std::vector<Entry>> by_comm;
};

// One communicator as every member's record names it.
struct CommInfo {
  std::string axis;
  std::vector<int> members;
};

RankRecord read_record(const fs::path& path, std::map<std::string, CommInfo>& comms) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) throw InputError(fmt::format("'{}' is empty", path.string()));
  const nlohmann::json header = parse_json_object(line, path.string());
  RankRecord r;
  r.rank = header.at("rank").get<int>();
  r.host = header.at("host").get<std::string>();
  r.reason = header.at("reason").get<std::string>();
  r.phase = header.at("phase").get<std::string>();
  r.step = header.at("step").get<int>();
  r.now_us = header.at("now_us").get<int64_t>();
  std::vector<std::string> keys;
  for (const nlohmann::json& c : header.at("comms")) {
    CommInfo info{c.at("axis").get<std::string>(), c.at("members").get<std::vector<int>>()};
    keys.push_back(fmt::format("{} [{}]", info.axis, fmt::join(info.members, ", ")));
    comms[keys.back()] = info;
  }
  while (std::getline(in, line)) {
    const nlohmann::json e = parse_json_object(line, path.string());
    const size_t comm = e.at("comm").get<size_t>();
    if (comm >= keys.size())
      throw InputError(fmt::format("'{}': an entry names communicator {} of {}", path.string(),
                                   comm, keys.size()));
    const int peer = e.at("peer").get<int>();
    const std::vector<int>& members = comms[keys[comm]].members;
    r.by_comm[keys[comm]].push_back(
        {e.at("id").get<uint64_t>(), e.at("seq").get<int64_t>(), e.at("op").get<std::string>(),
         e.at("bytes").get<uint64_t>(),
         peer >= 0 && peer < static_cast<int>(members.size()) ? members[peer] : -1,
         e.at("step").get<int>(), e.at("phase").get<std::string>(),
         e.at("issued_us").get<int64_t>(), e.at("completed_us").get<int64_t>()});
  }
  return r;
}

// A member's view of the collectives on one communicator.
struct MemberView {
  bool recorded = false;
  int64_t oldest = 0, last_issued = 0;
  std::map<int64_t, const Entry*> by_seq;
};

// An operation some ranks wait in and others never issued.
struct Stall {
  std::string comm, axis, op, phase;  // op: what the absent ranks never issued
  std::string waits_in;               // the waiters' own operation, where it differs
  bool sends = false;                 // point-to-point: the absent rank's missing op is a send
  int64_t seq = 0;
  uint64_t bytes = 0;
  int step = 0;
  std::vector<std::pair<int, double>> waiting;  // rank, seconds waited
  std::vector<int> absent;
};

// An operation waited on for less than this is in flight, not stuck: records are written by each
// rank on its own (a request reaches the ranks a few hundred milliseconds apart), so a healthy
// run's records show ranks a step apart, each briefly waiting for the others.
constexpr double kStuckSeconds = 1.0;

std::string size_text(uint64_t bytes) {
  return bytes >= 1048576 ? fmt::format("{:.1f} MiB", bytes / 1048576.0)
                          : fmt::format("{:.1f} KiB", bytes / 1024.0);
}

// The first collective on `comm` that not every member completed.
void find_collective_stall(const std::string& key, const CommInfo& info,
                           const std::map<int, RankRecord>& records, std::vector<Stall>& stalls) {
  std::map<int, MemberView> views;
  int64_t first_open = INT64_MAX;
  for (const int m : info.members) {
    MemberView& v = views[m];
    const auto r = records.find(m);
    if (r == records.end()) continue;
    v.recorded = true;
    const auto entries = r->second.by_comm.find(key);
    int64_t open = 1;
    if (entries != r->second.by_comm.end()) {
      for (const Entry& e : entries->second) {
        if (e.peer >= 0) continue;
        v.by_seq[e.seq] = &e;
        v.last_issued = std::max(v.last_issued, e.seq);
      }
      v.oldest = v.by_seq.empty() ? 0 : v.by_seq.begin()->first;
      open = v.last_issued + 1;
      for (const auto& [seq, e] : v.by_seq)
        if (e->completed_us < 0) {
          open = seq;
          break;
        }
    }
    first_open = std::min(first_open, open);
  }
  Stall stall;
  for (const int m : info.members) {
    const MemberView& v = views[m];
    if (!v.recorded) continue;
    const auto e = v.by_seq.find(first_open);
    if (e != v.by_seq.end() && e->second->completed_us < 0) {
      const Entry& x = *e->second;
      stall.waiting.push_back({m, (records.at(m).now_us - x.issued_us) / 1e6});
      stall.op = x.op;
      stall.bytes = x.bytes;
      stall.step = x.step;
      stall.phase = x.phase;
    } else if (v.last_issued < first_open) {
      stall.absent.push_back(m);
    }
  }
  for (const int m : info.members)
    if (!views[m].recorded) stall.absent.push_back(m);
  double longest = 0;
  for (const auto& w : stall.waiting) longest = std::max(longest, w.second);
  if (longest < kStuckSeconds) return;  // nobody waits here, or not for long
  stall.comm = key;
  stall.axis = info.axis;
  stall.seq = first_open;
  stalls.push_back(stall);
}

// Point-to-point operations on `comm`: a send or receive that waits for a peer that never posted
// the matching receive or send (the k-th send from a to b matches b's k-th receive from a).
void find_p2p_stalls(const std::string& key, const CommInfo& info,
                     const std::map<int, RankRecord>& records, std::vector<Stall>& stalls) {
  // (from, to, sends) -> entries
  std::map<std::tuple<int, int, bool>, std::vector<const Entry*>> lanes;
  for (const int m : info.members) {
    const auto r = records.find(m);
    if (r == records.end()) continue;
    const auto entries = r->second.by_comm.find(key);
    if (entries == r->second.by_comm.end()) continue;
    for (const Entry& e : entries->second) {
      if (e.peer < 0) continue;
      const bool sends = e.op.find("send") != std::string::npos;
      lanes[{sends ? m : e.peer, sends ? e.peer : m, sends}].push_back(&e);
    }
  }
  for (const auto& [lane, entries] : lanes) {
    const auto [from, to, sends] = lane;
    const int me = sends ? from : to, peer = sends ? to : from;
    if (!records.count(me)) continue;
    for (const Entry* e : entries) {
      if (e->completed_us >= 0) continue;
      // The peer's matching operation: issued at all?
      const auto other = lanes.find({from, to, !sends});
      int64_t posted = 0;
      if (other != lanes.end())
        for (const Entry* o : other->second) posted = std::max(posted, o->seq);
      if (records.count(peer) && posted >= e->seq) continue;  // posted: both wait on the wire
      const double waited = (records.at(me).now_us - e->issued_us) / 1e6;
      if (waited < kStuckSeconds) continue;
      Stall stall;
      stall.comm = key;
      stall.axis = info.axis;
      // Named as the peer's missing operation: the receive a send waits for, or the send.
      stall.op = sends ? fmt::format("recv from rank {}", me) : fmt::format("send to rank {}", me);
      stall.waits_in = e->op;
      stall.sends = !sends;
      stall.seq = e->seq;
      stall.bytes = e->bytes;
      stall.step = e->step;
      stall.phase = e->phase;
      stall.waiting.push_back({me, waited});
      stall.absent.push_back(peer);
      stalls.push_back(stall);
      break;  // the first per lane
    }
  }
}

// Another member with a record of `rank`'s data-parallel communicator ("dp"), or -1.
int data_parallel_twin(int rank, const std::map<std::string, CommInfo>& comms,
                       const std::map<int, RankRecord>& records) {
  for (const auto& [key, info] : comms) {
    if (info.axis != "dp") continue;
    if (std::find(info.members.begin(), info.members.end(), rank) == info.members.end()) continue;
    for (const int m : info.members)
      if (m != rank && records.count(m)) return m;
  }
  return -1;
}

// Where `twin` issued the operation of `stall` on its own communicator of that axis (the stall's
// own when twin is a member): its issue count, or UINT64_MAX when it has no such entry.
uint64_t issue_order(const RankRecord& twin, const Stall& stall,
                     const std::map<std::string, CommInfo>& comms) {
  const std::string& axis = stall.axis;
  for (const auto& [key, entries] : twin.by_comm) {
    if (comms.at(key).axis != axis) continue;
    for (const Entry& e : entries) {
      const bool p2p = e.peer >= 0;
      if (e.seq != stall.seq || p2p != !stall.waits_in.empty()) continue;
      if (p2p && (e.op.find("send") != std::string::npos) != stall.sends) continue;
      return e.id;
    }
  }
  return UINT64_MAX;
}

std::map<int, RankRecord> read_records(const fs::path& dir,
                                       std::map<std::string, CommInfo>& comms) {
  std::map<int, RankRecord> records;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank_", 0) != 0 || entry.path().extension() != ".jsonl") continue;
    RankRecord r = read_record(entry.path(), comms);
    records[r.rank] = std::move(r);
  }
  return records;
}

}  // namespace

std::vector<HangingRank> flight_report(const std::string& run_dir) {
  std::error_code ec;
  fs::path dir = fs::path(run_dir) / "flight";
  if (!fs::is_directory(dir, ec)) dir = run_dir;
  if (!fs::is_directory(dir, ec))
    throw InputError(fmt::format("'{}' is not a directory: give a run directory", run_dir));
  std::map<std::string, CommInfo> comms;
  const std::map<int, RankRecord> records = read_records(dir, comms);
  if (records.empty()) {
    std::printf(
        "no flight records in %s: no rank wrote one (a healthy run writes none); nobody "
        "is named\n",
        dir.string().c_str());
    return {};
  }
  std::set<std::string> reasons;
  for (const auto& [rank, r] : records) reasons.insert(r.reason);
  std::printf("%zu flight records in %s (written on: %s)\n", records.size(), dir.string().c_str(),
              fmt::format("{}", fmt::join(reasons, ", ")).c_str());

  std::vector<Stall> stalls;
  for (const auto& [key, info] : comms) {
    find_collective_stall(key, info, records, stalls);
    find_p2p_stalls(key, info, records, stalls);
  }
  std::set<int> waiting;
  for (const Stall& s : stalls)
    for (const auto& [rank, seconds] : s.waiting) waiting.insert(rank);
  for (const Stall& s : stalls) {
    std::vector<std::string> who;
    for (const auto& [rank, seconds] : s.waiting)
      who.push_back(s.waits_in.empty()
                        ? fmt::format("rank {} waits ({:.1f} s)", rank, seconds)
                        : fmt::format("rank {} waits in {} ({:.1f} s)", rank, s.waits_in, seconds));
    for (const int rank : s.absent)
      who.push_back(records.count(rank) ? fmt::format("rank {} never issued it", rank)
                                        : fmt::format("rank {} left no record", rank));
    std::printf("  %s: %s #%lld (%s), step %d, phase %s: %s\n", s.comm.c_str(), s.op.c_str(),
                static_cast<long long>(s.seq), size_text(s.bytes).c_str(), s.step, s.phase.c_str(),
                fmt::format("{}", fmt::join(who, "; ")).c_str());
  }
  // The ranks others wait for that wait for nobody themselves: where the hang starts. Of the
  // operations others wait for it in, the one on the axis of the phase it is in (tp_comm: tp)
  // comes first, then the longest waited for.
  std::map<int, std::vector<const Stall*>> culprits;
  for (const Stall& s : stalls)
    for (const int rank : s.absent)
      if (!waiting.count(rank)) culprits[rank].push_back(&s);
  std::vector<HangingRank> named;
  for (auto& [rank, waits] : culprits) {
    const auto r = records.find(rank);
    const std::string phase = r == records.end() ? "" : r->second.phase;
    const std::string phase_axis = phase.substr(0, phase.find('_'));
    auto longest = [](const Stall* s) {
      double most = 0;
      for (const auto& w : s->waiting) most = std::max(most, w.second);
      return most;
    };
    // A data-parallel twin runs the same program: the operation it issued first among those the
    // others wait for is the one the hanging rank did not reach first.
    const int twin = data_parallel_twin(rank, comms, records);
    auto twin_order = [&](const Stall* s) {
      return twin < 0 ? UINT64_MAX : issue_order(records.at(twin), *s, comms);
    };
    std::stable_sort(waits.begin(), waits.end(), [&](const Stall* a, const Stall* b) {
      if (twin_order(a) != twin_order(b)) return twin_order(a) < twin_order(b);
      const bool a_here = a->axis == phase_axis, b_here = b->axis == phase_axis;
      return a_here != b_here ? a_here : longest(a) > longest(b);
    });
    const Stall& first = *waits.front();
    HangingRank h{rank,
                  r == records.end() ? "?" : r->second.host,
                  first.axis,
                  first.op,
                  r == records.end() ? first.step : r->second.step,
                  r == records.end() ? "(no record: the process is gone)" : phase};
    std::vector<std::string> where;
    for (const Stall* s : waits) where.push_back(fmt::format("{} {} #{}", s->comm, s->op, s->seq));
    std::printf(
        "the rank that hangs: rank %d (host %s), in phase %s of step %d: the others wait "
        "for it in %s (axis %s, operation %s)\n",
        rank, h.host.c_str(), h.phase.c_str(), h.step,
        fmt::format("{}", fmt::join(where, "; ")).c_str(), h.axis.c_str(), h.op.c_str());
    named.push_back(h);
  }
  if (named.empty())
    std::printf("%s\n", stalls.empty()
                            ? "no rank has waited a second or more for another: nobody is named"
                            : "ranks wait, but each for another that waits too, or all in an "
                              "operation every member issued: no single rank to name (a transport "
                              "problem or a deadlock)");
  return named;
}

}  // namespace trident
