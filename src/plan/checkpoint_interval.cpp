// Young's and Daly's checkpoint intervals and the expected effective-training-time ratio.
#include "plan/checkpoint_interval.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

namespace trident {

CheckpointInterval checkpoint_interval(double write_s, double mtbf_s, double restart_s) {
  if (!(write_s > 0) || !std::isfinite(write_s))
    throw InputError(fmt::format("--checkpoint-seconds {} must be a positive number", write_s));
  if (!(mtbf_s > 0) || !std::isfinite(mtbf_s))
    throw InputError(fmt::format("--mtbf-hours must be a positive number (got {} s)", mtbf_s));
  if (!(restart_s >= 0) || !std::isfinite(restart_s))
    throw InputError(fmt::format("--restart-seconds {} must not be negative", restart_s));
  CheckpointInterval c;
  c.young_s = std::sqrt(2 * write_s * mtbf_s);
  const double x = write_s / (2 * mtbf_s);
  c.daly_s = write_s < 2 * mtbf_s ? c.young_s * (1 + std::sqrt(x) / 3 + x / 9) - write_s : mtbf_s;
  const double period = c.daly_s + write_s;
  c.ratio = std::max(0.0, c.daly_s / period * (1 - (period / 2 + restart_s) / mtbf_s));
  return c;
}

std::string describe(const CheckpointInterval& c, double write_s, double mtbf_s, double restart_s) {
  return fmt::format(
      "checkpoint every {:.1f} min (Daly's optimum; Young's {:.1f} min) for {:g} s writes and a "
      "failure every {:.3g} h with {:g} s restarts: expected effective training time {:.1f}%",
      c.daly_s / 60, c.young_s / 60, write_s, mtbf_s / 3600, restart_s, 100 * c.ratio);
}

}  // namespace trident
