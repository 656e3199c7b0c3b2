// comm/sim.c: the simulated network, the backend of build/plan's dry run
// (comm/backend.h): nothing moves; a collective queues on the virtual clock's
// link for its alpha-beta time (comm/sim_clock.h), and a wait moves compute to
// its end.
#include "comm/sim.h"

#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"
#include "comm/sim_clock.h"
#include "util/errors.h"

void comm_init_simulated(Comm *comm, int rank, int world, SimClock *clock) {
    memset(comm, 0, sizeof *comm);
    comm->rank = rank;
    comm->world = world;
    comm->local_size = 1;
    comm->backend = &comm_sim_backend;
    comm->sim = xcalloc(1, sizeof *comm->sim);
    *comm->sim = (CommSim){.clock = clock, .first = 0, .stride = 1};
    comm->spans_machines = clock->machine && world > clock->machine->ranks_per_node;
}

// Whether the group's ranks sit on more than one machine of the clock's.
static int spans_machines(const Comm *comm) {
    if (!comm->sim->clock->machine) return 0;
    int per_node = comm->sim->clock->machine->ranks_per_node;
    int last = comm->sim->first + comm->sim->stride * (comm->world - 1);
    return comm->sim->first / per_node != last / per_node;
}

// A barrier costs nothing here (the step's time does not count it).
static void sim_start(Comm *comm, CommHandle *h, const void *send, void *recv, size_t count, int root) {
    (void)send, (void)recv, (void)count, (void)root;
    if (h->op == COMM_BARRIER) return;
    double bytes = (double)h->count * dtype_size(h->dtype);
    h->sim_done = sim_collective(comm->sim->clock, h->op, bytes, comm->world, comm->spans_machines);
}

// Every simulated rank alike: the sum is N times this one's.
static void sim_start_sum_double(Comm *comm, CommHandle *h, double *value) {
    sim_start(comm, h, NULL, NULL, h->count, 0);
    *value *= comm->world;
}

// What compute waited, on the virtual clock; no record for a trace.
static double sim_wait_for(Comm *comm, CommHandle *h, double *done, void **event, int *keep) {
    double waited = comm->sim->clock->now;
    sim_wait(comm->sim->clock, h->sim_done);
    *done = h->sim_done, *event = NULL, *keep = 0;
    return comm->sim->clock->now - waited;
}

static int sim_test(Comm *comm, CommHandle *h) { return h->sim_done <= comm->sim->clock->now; }

static void sim_split(Comm *parent, Comm *group, int first, int stride) {
    group->sim = xcalloc(1, sizeof *group->sim);
    *group->sim = (CommSim){.clock = parent->sim->clock, .first = parent->sim->first + parent->sim->stride * first,
                            .stride = parent->sim->stride * stride};
    group->spans_machines = spans_machines(group);
}

static void sim_free(Comm *comm) {
    free(comm->sim);
    comm->sim = NULL;
}

const CommBackend comm_sim_backend = {
    .name = "sim", .start = sim_start, .start_sum_double = sim_start_sum_double, .wait = sim_wait_for,
    .test = sim_test, .split = sim_split, .free = sim_free, .host = &comm_sim_backend,
};
