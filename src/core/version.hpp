// The build's git revision, recorded in timings and checkpoints.
#pragma once

namespace trident {
const char* git_revision();
}
