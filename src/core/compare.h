// Error metrics used by verify, parity and the tests.
#pragma once
#include "core/tensor.h"

namespace h3 {

struct Diff {
  double rel_l2 = 0;   // ||a - b|| / ||b||
  double max_abs = 0;  // max |a - b|
  bool bitwise = false;
  bool shape_ok = true;
};
// Compares `got` against the reference `ref` (any float dtypes, same element count).
Diff compare(const Tensor& got, const Tensor& ref);

}  // namespace h3
