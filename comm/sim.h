// comm/sim.h: the simulated network behind comm.h, for build/plan's dry run
// (comm_init_simulated): one rank of N, whose collectives comm.c checks and
// counts as on MPI, and which comm/sim.c (the backend comm_sim_backend, comm/
// backend.h) carries on a virtual clock (comm/sim_clock.h) instead of a wire:
// nothing moves, each costs its alpha-beta time.
#ifndef SHARDLAB_COMM_SIM_H
#define SHARDLAB_COMM_SIM_H

#include "comm/comm.h"

// The group's ranks in the run's whole world are first, first + stride, ...:
// whether they span machines picks the link.
struct CommSim {
    struct SimClock *clock;
    int first, stride;
};

#endif
