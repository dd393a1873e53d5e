// One profile region's totals (core/profile.h) as the JSON the bench commands write.
#pragma once
#include <nlohmann/json.hpp>

#include "core/profile.h"

namespace h3 {

inline nlohmann::json profile_json(const profile::Total& t) {
  return {{"seconds", t.seconds},
          {"spans", t.spans},
          {"host_seconds", t.host_seconds},
          {"idle_before_seconds", t.idle_before},
          {"host_only", t.host_only}};
}

}  // namespace h3
