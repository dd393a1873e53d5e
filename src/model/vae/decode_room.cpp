#include "model/vae/decode_room.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"
#include "ops/ops.h"

namespace h3 {

int64_t DecodeRoom::left() const {
  return std::max<int64_t>(budget - in_use, 0);
}

DecodeRoom decode_room(Device device) {
  DecodeRoom r;
  if (device == Device::cpu) return r;
  const int64_t budget = ops::device_budget_bytes(device);
  if (budget <= 0) return r;
  r.budget = budget;
  r.in_use = ops::device_in_use_bytes(device);
  return r;
}

int64_t decode_units_per_call(const std::string& model, const std::string& unit, int64_t unit_bytes,
                              const DecodeRoom& room, double share, int64_t most) {
  most = std::max<int64_t>(most, 1);
  if (!room.known()) return most;
  if (unit_bytes > room.left())
    fail(
        "{} decode: one {} needs {} of device memory for its activations, but only {} are left under the "
        "device-memory budget of {} ({} in use); raise --max-device-memory, keep fewer models resident, or decode "
        "on a larger device",
        model, unit, format_byte_size(unit_bytes), format_byte_size(room.left()), format_byte_size(room.budget),
        format_byte_size(room.in_use));
  const int64_t fit = static_cast<int64_t>(static_cast<double>(room.left()) * share) / std::max<int64_t>(unit_bytes, 1);
  return std::clamp<int64_t>(fit, 1, most);
}

}  // namespace h3
