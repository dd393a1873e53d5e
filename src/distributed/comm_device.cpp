#include "distributed/comm_device.h"

#include <functional>

#include "core/error.h"
#include "core/log.h"
#include "core/names.h"

namespace h3 {

namespace {
constexpr std::array<Named<Transport>, 3> kTransportNames{
    {{Transport::automatic, "auto"}, {Transport::mpi, "mpi"}, {Transport::nccl, "nccl"}}};
}  // namespace

Transport transport_from_name(const std::string& s) {
  return value_in(kTransportNames, s, "transport", "auto, mpi, nccl");
}

std::string_view transport_name(Transport t) {
  return name_in(kTransportNames, t);
}

Transport pick_device_transport(Comm& host, const std::string& gpu_bus, Transport wanted) {
  // One rank needs no transport, except when NCCL is asked for explicitly (it then checks the NCCL path itself).
  if (wanted == Transport::mpi || (host.size() == 1 && wanted != Transport::nccl)) return Transport::mpi;
  const bool asked = wanted == Transport::nccl;
  std::string why;
  if (!nccl_built())
    why = "this build has no NCCL";
  else if (gpu_bus.empty())
    why = "the GPU backend is not running (--device cuda)";
  // Every rank learns whether all GPUs are distinct (NCCL refuses two ranks of one communicator on one GPU).
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(host.host() + "/" + gpu_bus) & 0x7fffffffffff);
  std::vector<int64_t> all(host.size());
  host.allgatherv(&mine, all.data(), std::vector<int64_t>(host.size(), 1), DType::i64, "GPU identities");
  int64_t flags = why.empty() ? 0 : 1;  // any rank unable -> everyone falls back
  int64_t any = 0;
  host.allreduce_sum(&flags, &any, 1, DType::i64, "NCCL availability");
  if (why.empty() && any > 0) why = "another rank cannot use NCCL";
  for (size_t i = 0; why.empty() && i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (all[i] == all[j]) {
        why = fmt::format("ranks {} and {} share one GPU", host.world_rank(static_cast<int>(i)),
                          host.world_rank(static_cast<int>(j)));
        break;
      }
  if (why.empty()) return Transport::nccl;
  if (asked) fail("--transport nccl cannot be used: {} (use --transport mpi or auto)", why);
  spdlog::info("device tensors travel through MPI (host memory): {}", why);
  return Transport::mpi;
}

}  // namespace h3
