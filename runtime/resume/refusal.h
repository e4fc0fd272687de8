// One rank's reason for refusing a checkpoint, whatever reading it threw.
#pragma once

#include <functional>
#include <string>

namespace slurmddp::resume {

// Runs `read`. Returns "" when it returns; else the reason it failed, for the
// load's agreement: an Error's message as it is, any other exception
// (std::bad_alloc, std::length_error from a size no file should announce)
// as "checkpoint: rank <rank> failed to read <what>: <what()> (<its type>)".
// Every exception becomes a reason, so that one rank's failure reaches every
// rank through the agreement instead of leaving them waiting for it.
std::string refusal_of(const std::function<void()>& read, int rank, const std::string& what);

}  // namespace slurmddp::resume
