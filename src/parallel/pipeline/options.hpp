// The typed choice of a pipeline schedule, with its config names (what a run config names; the
// schedules themselves are in schedule.hpp).
#pragma once

#include <array>

#include "core/names.hpp"

namespace trident::pipeline {

enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved, kZeroBubbleH1 };

}  // namespace trident::pipeline

namespace trident {

template <>
inline constexpr std::array<Named<pipeline::ScheduleKind>, 4> kNames<pipeline::ScheduleKind>{
    {{pipeline::ScheduleKind::kGpipe, "gpipe"},
     {pipeline::ScheduleKind::kOneFOneB, "1f1b"},
     {pipeline::ScheduleKind::kInterleaved, "interleaved"},
     {pipeline::ScheduleKind::kZeroBubbleH1, "zb_h1"}}};

}  // namespace trident
