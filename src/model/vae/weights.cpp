#include "model/vae/weights.h"

#include <fmt/ranges.h>

#include "core/finite.h"

namespace h3 {

bool VaeWeightReader::check(const std::string& key, const Shape& shape) {
  if (!f_.has(key)) {
    missing_.push_back(key);
    return false;
  }
  const Shape stored = f_.shape(key);
  if (!shape.empty() && stored != shape) {
    misshaped_.push_back(fmt::format("{} is {}, expected {}", key, shape_str(stored), shape_str(shape)));
    return false;
  }
  return true;
}

// NaN / Inf are refused where they enter (a decode would write a "completed" video of garbage). Weights read
// through a DeviceLoader (load below) are scanned by the loader as they are read.
void VaeWeightReader::refuse_non_finite(const std::string& key, const Tensor& t) const {
  if (const NonFinite bad = find_non_finite(t); bad.count > 0)
    fail(
        "{}: {} weight '{}' holds {} non-finite values (NaN or Inf), the first at element {}; the file is damaged "
        "(download or convert it again)",
        f_.path(), what_, key, bad.count, bad.first);
}

Tensor VaeWeightReader::get(const std::string& name, const Shape& shape) {
  const std::string key = prefix_ + name;
  if (!check(key, shape)) return Tensor(ct_, shape);
  Tensor t = f_.load(host_, key, ct_);
  refuse_non_finite(key, t);
  return t;
}

Tensor VaeWeightReader::load(DeviceLoader& loader, const std::string& name, const Shape& shape, DType dtype,
                             const std::vector<RowRange>& rows) {
  const std::string key = prefix_ + name;
  if (!check(key, shape)) {
    Shape s = shape;
    if (!rows.empty() && !s.empty()) {
      s[0] = 0;
      for (const RowRange& r : rows) s[0] += r.size();
    }
    return Tensor(dtype, s, loader.device());
  }
  return f_.load(loader, key, dtype, rows);
}

void VaeWeightReader::finish() const {
  if (missing_.empty() && misshaped_.empty()) return;
  std::string msg = fmt::format("{}: {} weights do not match the configuration", f_.path(), what_);
  if (!missing_.empty()) msg += fmt::format("; missing ({}): {}", missing_.size(), fmt::join(missing_, ", "));
  if (!misshaped_.empty()) msg += fmt::format("; mis-shaped: {}", fmt::join(misshaped_, "; "));
  msg += " (check that the file is this VAE and that its config metadata matches the weights)";
  throw Error(msg);
}

}  // namespace h3
