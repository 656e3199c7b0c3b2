// comm_sim.h: the simulated network behind comm.h, for build/plan's dry run
// (comm_init_simulated): one rank of N, whose collectives comm.c checks and
// counts as on MPI, and which comm_sim.c carries on a virtual clock
// (step_time.h) instead of a wire: nothing moves, each costs its alpha-beta time.
#ifndef SHARDLAB_COMM_SIM_H
#define SHARDLAB_COMM_SIM_H

#include "comm.h"

// The group's ranks in the run's whole world are first, first + stride, ...:
// whether they span machines picks the link.
struct CommSim {
    struct SimClock *clock;
    int first, stride;
};

// Queues the handle's collective on the clock's link (handle.sim_done).
CommHandle comm_sim_start(Comm *comm, CommHandle handle);
// Compute waits on the clock until the collective is done.
void comm_sim_wait(Comm *comm, CommHandle *handle);
// 1 once the clock has reached the collective's end.
int comm_sim_test(const Comm *comm, const CommHandle *handle);
// group: the parent's ranks first, first + stride, ... (comm_split).
void comm_sim_split(const Comm *parent, Comm *group, int first, int stride);
void comm_sim_free(Comm *comm);

#endif
