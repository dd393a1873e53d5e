#include "distributed/placement.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace h3 {

namespace {

constexpr size_t kField = 128;  // bytes per gathered name (host names are at most 64 on Linux)

std::vector<std::string> gather_strings(Comm& comm, const std::string& mine, const std::string& what) {
  char buf[kField] = {0};
  std::strncpy(buf, mine.c_str(), kField - 1);
  std::vector<char> all(kField * static_cast<size_t>(comm.size()));
  comm.allgatherv(buf, all.data(), std::vector<int64_t>(comm.size(), static_cast<int64_t>(kField)), DType::u8, what);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(all.data() + kField * static_cast<size_t>(r));
  return out;
}

// "0-3" or "0,2,5" for a sorted list of ranks.
std::string rank_list(const std::vector<int>& r) {
  bool consecutive = true;
  for (size_t i = 1; i < r.size(); ++i) consecutive &= r[i] == r[i - 1] + 1;
  if (r.size() > 1 && consecutive) return fmt::format("ranks {}-{}", r.front(), r.back());
  std::string list;
  for (int x : r) list += fmt::format("{}{}", list.empty() ? "" : ",", x);
  return fmt::format("rank{} {}", r.size() > 1 ? "s" : "", list);
}

}  // namespace

int local_rank(Comm& world) {
  const std::string me = world.host();
  int local = 0;
  for (int r = 0; r < world.rank(); ++r)
    if (host_of_world_rank(r) == me) ++local;
  return local;
}

std::vector<RankPlace> gather_placement(Comm& comm, const std::string& my_device) {
  const std::vector<std::string> devices = gather_strings(comm, my_device, "placement (devices)");
  std::vector<RankPlace> out;
  std::vector<std::string> seen;
  for (int r = 0; r < comm.size(); ++r) {
    RankPlace p;
    p.rank = comm.world_rank(r);
    p.host = host_of_world_rank(p.rank);
    p.device = devices[static_cast<size_t>(r)];
    for (const auto& h : seen) p.local_rank += h == p.host;
    seen.push_back(p.host);
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> placement_lines(const std::vector<RankPlace>& places) {
  std::vector<std::string> hosts;
  for (const auto& p : places)
    if (std::find(hosts.begin(), hosts.end(), p.host) == hosts.end()) hosts.push_back(p.host);
  std::vector<std::string> lines = {fmt::format("placement: {} rank{} on {} host{}", places.size(),
                                                places.size() == 1 ? "" : "s", hosts.size(),
                                                hosts.size() == 1 ? "" : "s")};
  for (const auto& h : hosts) {
    std::string line = fmt::format("  host {}:", h);
    const char* sep = " ";
    for (const auto& p : places)
      if (p.host == h) {
        line += fmt::format("{}rank {} (local {}, {})", sep, p.rank, p.local_rank, p.device);
        sep = ", ";
      }
    lines.push_back(line);
  }
  return lines;
}

std::string hosts_of_ranks(const std::vector<int>& world_ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int r : world_ranks) {
    const std::string h = host_of_world_rank(r);
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_host.end()) {
      by_host.push_back({h, {}});
      it = by_host.end() - 1;
    }
    it->second.push_back(r);
  }
  std::string out;
  for (const auto& [h, rs] : by_host) out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", h, rank_list(rs));
  return out;
}

}  // namespace h3
