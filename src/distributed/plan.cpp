#include "distributed/plan.h"

#include "core/error.h"
#include "core/names.h"
#include "distributed/comm_check.h"

namespace h3 {

namespace {
constexpr std::array<Named<DistMode>, 4> kModeNames{{{DistMode::ulysses, "ulysses"},
                                                     {DistMode::ulysses_ag, "ulysses-ag"},
                                                     {DistMode::tensor, "tensor"},
                                                     {DistMode::hybrid, "hybrid"}}};
}  // namespace

std::string_view dist_mode_name(DistMode m) {
  return name_in(kModeNames, m);
}

DistMode dist_mode_from_name(const std::string& s) {
  return value_in(kModeNames, s, "mode", "ulysses, ulysses-ag, tensor, hybrid");
}

DistPlan DistPlan::make(Comm& comm, const DistOptions& opt, int heads, int ffn_dim) {
  DistPlan p;
  p.mode = opt.mode;
  p.world = comm.size();
  p.rank = comm.rank();
  p.chunks = std::max(1, opt.chunks);
  p.world_comm = &comm;
  switch (opt.mode) {
    case DistMode::ulysses:
    case DistMode::ulysses_ag:
      p.K = 1;
      break;
    case DistMode::tensor:
      p.K = p.world;
      break;
    case DistMode::hybrid:
      if (opt.tp < 1 || p.world % opt.tp != 0)
        fail("hybrid mode: --tp {} must divide the number of ranks {} (mesh tp x ulysses)", opt.tp, p.world);
      p.K = opt.tp;
      break;
  }
  p.U = p.world / p.K;
  p.t = p.rank % p.K;
  p.u = p.rank / p.K;
  // Every split must leave each rank something: heads over K then over U, FFN columns over K.
  for (const auto& part : partition(heads, p.K, "attention heads (tensor-parallel)"))
    partition(part.size(), p.U, "attention heads (sequence-parallel, per tensor-parallel slice)");
  partition(ffn_dim, p.K, "FFN columns");
  p.tp_comm = std::shared_ptr<Comm>(comm.split(p.u, p.t));
  p.sp_comm = std::shared_ptr<Comm>(comm.split(p.t, p.u));
  // On GPUs, the groups that exchange activations get NCCL when every rank has its own GPU.
  if (!opt.gpu_bus.empty() && pick_device_transport(comm, opt.gpu_bus, opt.transport) == Transport::nccl) {
    p.transport = "nccl";
    if (p.tp_comm->size() > 1) {
      p.tp_comm = std::shared_ptr<Comm>(make_nccl_comm(*p.tp_comm, p.tp_comm));
      comm_probe(*p.tp_comm, "NCCL (tensor-parallel group)");
    }
    if (p.sp_comm->size() > 1) {
      p.sp_comm = std::shared_ptr<Comm>(make_nccl_comm(*p.sp_comm, p.sp_comm));
      comm_probe(*p.sp_comm, "NCCL (sequence-parallel group)");
    }
  }
  return p;
}

DistPlan DistPlan::single() {
  static std::unique_ptr<Comm> local = make_local_comm();
  DistPlan p;
  p.world_comm = local.get();
  p.tp_comm = std::shared_ptr<Comm>(make_local_comm());
  p.sp_comm = std::shared_ptr<Comm>(make_local_comm());
  return p;
}

std::string DistPlan::describe() const {
  return fmt::format("mode {} on {} ranks (tensor {} x sequence {}), rank {} = (t {}, u {}), {} chunk(s), {} transport",
                     dist_mode_name(mode), world, K, U, rank, t, u, chunks, transport);
}

}  // namespace h3
