// A C++ program of a user of the installed library, for the tests of the
// admin's installs (install_test: a staged tree; packages_test: the .debs): it
// includes every public header, reads its identity from the plugin's
// variables, prints the sampler's shard of 20 samples, then joins the step's
// rendezvous with init() and sums rank + 1 over every rank.
#pragma once

#include <string>
#include <vector>

#include "cluster.h"

namespace slurmddp::systest {

// The source: #include <slurmddp/H> for each of `headers`, then main().
std::string consumer_source(const std::vector<std::string>& headers);

// Checks the "consumer ..." lines of a step of `world` ranks, `per_node` a
// node: identity from the plugin's variables, and without shuffle rank r's
// shard r, r+world, ... of 20 samples (torch pads from the start), and the
// sum world * (world + 1) / 2.
void expect_consumer_lines(const Result& r, int world, int per_node);

}  // namespace slurmddp::systest
