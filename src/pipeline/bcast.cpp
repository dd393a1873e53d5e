#include "pipeline/bcast.h"

#include <nlohmann/json.hpp>

#include "core/json_limits.h"

namespace h3 {

using json = nlohmann::json;

void bcast_tensor(Comm& comm, Tensor& t, int root, const std::string& what) {
  // Shape travels first (ndim, dims), then the bytes; every rank ends with an f32 tensor.
  int64_t hdr[9] = {0};
  if (comm.rank() == root) {
    H3_CHECK(t.ndim() <= 8, "{}: too many dimensions", what);
    hdr[0] = t.ndim();
    for (int i = 0; i < t.ndim(); ++i) hdr[1 + i] = t.dim(i);
  }
  comm.broadcast(hdr, sizeof(hdr), root, what + " (shape)");
  Shape s(hdr + 1, hdr + 1 + hdr[0]);
  if (comm.rank() == root)
    t = t.to(DType::f32);
  else
    t = Tensor(DType::f32, s);
  comm.broadcast(t.raw(), static_cast<int64_t>(t.nbytes()), root, what);
}

std::string bcast_string(Comm& comm, const std::string& s, int root, const std::string& what) {
  int64_t n = static_cast<int64_t>(s.size());
  comm.broadcast(&n, sizeof(n), root, what + " (length)");
  std::string out = comm.rank() == root ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) comm.broadcast(out.data(), n, root, what);
  return out;
}

// A tensor with its dtype kept (bcast_tensor above sends f32): the vision rows of an f64 run stay f64.
void bcast_tensor_as_is(Comm& comm, Tensor& t, int root, const std::string& what) {
  int64_t hdr[10] = {0};
  if (comm.rank() == root) {
    H3_CHECK(t.ndim() <= 8, "{}: too many dimensions", what);
    hdr[0] = t.defined() ? static_cast<int64_t>(t.dtype()) : -1;
    hdr[1] = t.defined() ? t.ndim() : 0;
    for (int i = 0; t.defined() && i < t.ndim(); ++i) hdr[2 + i] = t.dim(i);
  }
  comm.broadcast(hdr, sizeof(hdr), root, what + " (shape)");
  if (hdr[0] < 0) {
    t = Tensor();
    return;
  }
  if (comm.rank() != root) t = Tensor(static_cast<DType>(hdr[0]), Shape(hdr + 2, hdr + 2 + hdr[1]));
  if (t.nbytes() > 0) comm.broadcast(t.raw(), static_cast<int64_t>(t.nbytes()), root, what);
}

// The prepared prompt (PromptInputs) from `root` to every rank of `comm`.
void bcast_prompt(Comm& comm, PromptInputs& p, int root) {
  const bool me = comm.rank() == root;
  std::string head;
  if (me)
    head = json{{"ids", p.ids},
                {"positions", p.positions},
                {"rows", p.extras.rows},
                {"deepstack", p.extras.deepstack.size()},
                {"vision_ranges", p.vision_ranges},
                {"text", p.text}}
               .dump(-1, ' ', false, json::error_handler_t::replace);
  head = bcast_string(comm, head, root, "prompt tokens");
  if (!me) {
    const json j = parse_json_bounded(head, "the broadcast prompt tokens", kJsonMaxDepth, false);
    p.ids = j.at("ids").get<std::vector<int32_t>>();
    p.positions = j.at("positions").get<std::vector<int64_t>>();
    p.extras.rows = j.at("rows").get<std::vector<int64_t>>();
    p.extras.deepstack.assign(j.at("deepstack").get<size_t>(), Tensor());
    p.vision_ranges = j.at("vision_ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
    p.text = j.at("text").get<std::string>();
  }
  if (p.extras.rows.empty()) return;
  bcast_tensor_as_is(comm, p.extras.embeds, root, "vision rows");
  for (size_t k = 0; k < p.extras.deepstack.size(); ++k)
    bcast_tensor_as_is(comm, p.extras.deepstack[k], root, fmt::format("DeepStack features {}", k));
}

}  // namespace h3
