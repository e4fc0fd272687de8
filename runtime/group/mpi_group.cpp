// init_from_mpi() (slurmddp/mpi_communicator.h) and init()'s
// SLURMDDP_BACKEND=mpi (group/mpi_group.h).
#include "group/mpi_group.h"

#include <unistd.h>

#include "slurmddp/error.h"
#include "slurmddp/mpi_communicator.h"

namespace slurmddp {

namespace {

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(ProcessIdentity id, std::shared_ptr<Communicator> comm, std::chrono::milliseconds t,
           bool finalize)
      : id_(std::move(id)), comm_(std::move(comm)), timeout_(t), finalize_(finalize) {}
  ~MpiGroup() override {
    comm_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalize_ && !finalized) MPI_Finalize();
  }
  const ProcessIdentity& identity() const override { return id_; }
  const std::shared_ptr<Communicator>& comm() const override { return comm_; }
  std::shared_ptr<Store> store() const override { return nullptr; }
  Bootstrap bootstrap() const override { return Bootstrap::kAuto; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    comm_->barrier()->wait(timeout_);
  }

 private:
  ProcessIdentity id_;
  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  bool finalize_;
  bool shut_down_ = false;
};

std::unique_ptr<ProcessGroup> make_group(MPI_Comm comm, const MpiOptions& options, bool finalize) {
  std::shared_ptr<Communicator> c = make_mpi_communicator(comm, options);
  ProcessIdentity id;
  id.source = IdentitySource::kMpi;
  id.rank = c->rank();
  id.world_size = c->size();
  // The node's ranks: MPI's shared-memory split; nodes: count of node leaders.
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, id.rank, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &id.local_rank);
    MPI_Comm_size(node, &id.local_world_size);
    // Nodes are counted by their leaders (local rank 0); a node's rank is the
    // number of leaders before its own, which the leader shares with the node
    // (the ranks of a node need not be consecutive).
    int leader = id.local_rank == 0 ? 1 : 0, before = 0, nodes = 0;
    MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, comm);
    if (id.rank == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
    MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, comm);
    MPI_Bcast(&before, 1, MPI_INT, 0, node);
    MPI_Comm_free(&node);
    id.node_rank = before;
    id.num_nodes = nodes;
  }
  return std::make_unique<MpiGroup>(std::move(id), std::move(c), options.timeout, finalize);
}

}  // namespace

std::unique_ptr<ProcessGroup> init_from_mpi(MPI_Comm comm, const MpiOptions& options) {
  return make_group(comm, options, false);
}

std::unique_ptr<ProcessGroup> init_mpi_backend(std::chrono::milliseconds timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool own = false;
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw InvalidArgument("init: SLURMDDP_BACKEND=mpi: MPI_Init_thread failed");
    }
    own = true;
  }
  MpiOptions o;
  o.timeout = timeout;
  return make_group(MPI_COMM_WORLD, o, own);
}

}  // namespace slurmddp
