#include "comm/sim_clock.h"

#include <math.h>
#include <stdlib.h>

#include "util/errors.h"

void sim_clock_init(SimClock *clock, const Machine *machine, int world) {
    int local = world < machine->ranks_per_node ? world : machine->ranks_per_node;
    double rate = machine->flops_per_s;
    if (machine->compute_slots > 0 && local > machine->compute_slots) rate *= (double)machine->compute_slots / local;
    *clock = (SimClock){.machine = machine, .flops_per_s = rate, .host_memory = machine->host_memory / local};
}

void sim_compute(SimClock *clock, double flops) {
    double seconds = flops / clock->flops_per_s;
    clock->now += seconds;
    clock->spent.compute += seconds;
    clock->spent.step = clock->now;
}

// The link a collective of kind `op` runs at: between machines, or inside one at
// that kind's own fit if it has one.
static Link group_link(const Machine *m, CommOp op, int spans_machines) {
    if (spans_machines) return m->across;
    return m->within_op[op].beta > 0 ? m->within_op[op] : m->within;
}

double sim_collective(SimClock *clock, CommOp op, double bytes, int ranks, int spans_machines) {
    double seconds = collective_seconds(op, bytes, ranks, group_link(clock->machine, op, spans_machines));
    double begin = clock->now > clock->link_free ? clock->now : clock->link_free;
    clock->link_free = begin + seconds;
    clock->spent.comm += seconds;
    return clock->link_free;
}

void sim_wait(SimClock *clock, double done) {
    if (done <= clock->now) return;
    clock->spent.exposed += done - clock->now;
    clock->now = done;
    clock->spent.step = clock->now;
}

static double later(double a, double b) { return a > b ? a : b; }

void sim_offload_down(SimClock *clock, double bytes) {
    Link host = clock->machine->host;
    clock->host_link_free = later(clock->now, clock->host_link_free) + host.alpha + bytes / host.beta;
}

void sim_offload_update(SimClock *clock, double down, double adam_bytes, double bytes_up) {
    Link host = clock->machine->host;
    clock->host_cpu_free = later(down, clock->host_cpu_free) + adam_bytes / clock->host_memory;
    clock->host_link_free = later(clock->host_cpu_free, clock->host_link_free) + host.alpha + bytes_up / host.beta;
}

void sim_offload_wait(SimClock *clock) {
    double done = later(clock->host_link_free, clock->host_cpu_free);
    if (done <= clock->now) return;
    clock->spent.offload += done - clock->now;
    clock->now = done;
    clock->spent.step = clock->now;
}

// Each timing is alpha * steps + beta^-1 * bytes moved per rank: a linear least
// squares in (alpha, 1/beta), solved from its 2x2 normal equations.
int fit_link(const CommOp *op, const int *ranks, const double *bytes, const double *seconds, int n, Link *link) {
    double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
    for (int i = 0; i < n; i++) {
        Link unit_alpha = {1, INFINITY}, unit_beta = {0, 1};  // the two columns: steps and bytes per rank
        double x = collective_seconds(op[i], bytes[i], ranks[i], unit_alpha);
        double y = collective_seconds(op[i], bytes[i], ranks[i], unit_beta);
        sxx += x * x, sxy += x * y, syy += y * y, sxt += x * seconds[i], syt += y * seconds[i];
    }
    double det = sxx * syy - sxy * sxy;
    if (n < 2 || fabs(det) <= 1e-12 * sxx * syy) return -1;
    double alpha = (sxt * syy - syt * sxy) / det, inverse_beta = (sxx * syt - sxy * sxt) / det;
    if (alpha < 0) alpha = 0;  // noise on a fast link: latency below what the sizes resolve
    if (inverse_beta <= 0) return -1;
    *link = (Link){alpha, 1 / inverse_beta};
    return 0;
}
