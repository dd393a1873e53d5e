#include "model/vae/weights.h"

#include <fmt/ranges.h>

#include "core/finite.h"

namespace h3 {

Tensor VaeWeightReader::get(const std::string& name, const Shape& shape) {
  const std::string key = prefix_ + name;
  if (!f_.has(key)) {
    missing_.push_back(key);
    return Tensor(ct_, shape);
  }
  Tensor t = f_.get(key);
  if (!shape.empty() && t.shape() != shape) {
    misshaped_.push_back(fmt::format("{} is {}, expected {}", key, shape_str(t.shape()), shape_str(shape)));
    return Tensor(ct_, shape);
  }
  // NaN / Inf are refused where they enter (a decode would write a "completed" video of garbage).
  if (const NonFinite bad = find_non_finite(t); bad.count > 0)
    fail(
        "{}: {} weight '{}' holds {} non-finite values (NaN or Inf), the first at element {}; the file is damaged "
        "(download or convert it again)",
        f_.path(), what_, key, bad.count, bad.first);
  return t.to(ct_);
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
