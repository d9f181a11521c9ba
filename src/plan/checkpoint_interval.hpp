// How often to checkpoint: Young's and Daly's optimum interval, and the effective training time.
#pragma once

#include <string>

namespace trident {

struct CheckpointInterval {
  double young_s = 0;  // Young (1974): sqrt(2 delta M)
  double daly_s = 0;   // Daly (2006), higher order: what the plan recommends
  double ratio = 0;    // expected effective-training-time ratio at daly_s
};

// For a checkpoint write of `write_s` seconds (delta), a mean time between failures of `mtbf_s`
// (M) and `restart_s` from a failure to training again (R): Daly's interval
// tau = sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta (M itself when
// delta >= 2M), and the effective-training-time ratio with it, to first order in 1/M:
// tau / (tau + delta) x (1 - ((tau + delta) / 2 + R) / M): each interval of training costs a
// write, and a failure loses half an interval and its write on average, and the restart.
// InputError unless write_s > 0, mtbf_s > 0 and restart_s >= 0.
CheckpointInterval checkpoint_interval(double write_s, double mtbf_s, double restart_s);

// "checkpoint every 19.2 min (Daly's optimum; Young's 20.1 min) for 60 s writes and a failure
// every 3.09 h with 600 s restarts: expected effective training time 84.1%"
std::string describe(const CheckpointInterval& c, double write_s, double mtbf_s, double restart_s);

}  // namespace trident
