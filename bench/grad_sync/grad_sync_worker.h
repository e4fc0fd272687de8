// One rank of the GradSync benchmark (grad_sync_bench.cpp starts them as
// "--worker --rank R --world N --store-port P", rank_args.h): GradSync and a
// flat allreduce over Gloo on the models' parameter sizes, driven by the
// launcher one command at a time.
#pragma once

#include "rank_args.h"  // tests/support

namespace slurmddp::bench {

// Joins the launcher's store, then serves its commands on stdin until "quit".
void serve_worker(const support::RankArgs& self);

}  // namespace slurmddp::bench
