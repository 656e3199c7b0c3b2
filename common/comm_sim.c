// comm_sim.c: the simulated network (comm_sim.h).
#include "comm_sim.h"

#include <stdlib.h>

#include "step_time.h"
#include "util/errors.h"

// Whether the group's ranks sit on more than one machine of the clock's.
static int spans_machines(const Comm *comm) {
    int per_node = comm->sim->clock->machine->ranks_per_node;
    int last = comm->sim->first + comm->sim->stride * (comm->world - 1);
    return comm->sim->first / per_node != last / per_node;
}

CommHandle comm_sim_start(Comm *comm, CommHandle h) {
    double bytes = (double)h.count * dtype_size(h.dtype);
    h.sim_done = sim_collective(comm->sim->clock, h.op, bytes, comm->world, spans_machines(comm));
    return h;
}

void comm_sim_wait(Comm *comm, CommHandle *h) { sim_wait(comm->sim->clock, h->sim_done); }

int comm_sim_test(const Comm *comm, const CommHandle *h) { return h->sim_done <= comm->sim->clock->now; }

void comm_sim_split(const Comm *parent, Comm *group, int first, int stride) {
    group->sim = xcalloc(1, sizeof *group->sim);
    *group->sim = (CommSim){.clock = parent->sim->clock, .first = parent->sim->first + parent->sim->stride * first,
                            .stride = parent->sim->stride * stride};
}

void comm_sim_free(Comm *comm) {
    free(comm->sim);
    comm->sim = NULL;
}
