// sim_clock.h: the model of a training step's time behind build/plan --time: a
// virtual clock that a dry run (dry_run.h) advances while the strategies' own
// code runs a step on the dry device.
//
// Each collective costs alpha per message step plus its bytes over the link's
// bandwidth beta (the alpha-beta model of the ring and chain algorithms whose
// bytes comm.h counts):
//
//   all_reduce          2(n-1) alpha + 2(n-1)/n S / beta
//   reduce_scatter,
//   all_gather            (n-1) alpha +   (n-1)/n S / beta
//   broadcast, reduce     (n-1) alpha +           S / beta   (a pipelined chain)
//
// with S the bytes of the whole buffer and n the ranks of the group. A group
// that spans machines runs at the speed of the link between them; inside a
// machine each kind of collective may have its own alpha and beta (measured:
// on one machine a reduction and a gather run at different speeds).
//
// The clock keeps the rank's two timelines, its compute and its link. Each unit
// the model runs advances compute by the unit's FLOPs at the rank's rate; each
// collective the strategy starts (comm.h's simulated network) queues on the
// link, running once the link is free; each wait moves compute to the
// collective's end if it is not there yet: that time is the exposed
// communication. Whatever schedule the strategy's code follows (prefetch,
// accumulation, hybrid groups, a student's change) the clock follows it. The
// device's optimizer step costs nothing of its own here (it is inside the measured
// rate), nor do the host's own overheads.
//
// With --offload-optimizer (kit/resident.h) two more timelines run beside
// compute: the host link (one copy at a time) and the host's CPU (one AdamW at
// a time). Each tensor's update is three pieces, each queued behind the last
// on its timeline:
//
//   down  (link)  alpha_h + gradient bytes / beta_h   from when it is issued
//   AdamW (CPU)   AdamW's bytes / host memory's rate  once its unit's gradients are down
//   up    (link)  alpha_h + parameter bytes / beta_h  once its AdamW is done
//
// and compute waits for the last of them at the end of the step (the next
// forward reads the parameters): that wait is the offload's cost. Issued as
// units' gradients become final, the pieces hide behind the backward still to
// run; issued at the step (a --grad-clip run), nothing hides them. Every GPU has
// a host link of its own; a machine's ranks, updating at the same time, share
// its memory's rate.
#ifndef SHARDLAB_SIM_CLOCK_H
#define SHARDLAB_SIM_CLOCK_H

#include "comm/comm.h"

typedef struct {
    double alpha;  // seconds per message step (latency)
    double beta;   // bytes per second (bandwidth)
} Link;

typedef struct {
    double flops_per_s;  // one rank's compute rate (tokens/s of one rank x FLOPs per token)
    int ranks_per_node;  // ranks that share a machine, and its fast link
    int compute_slots;   // ranks of a machine that compute at that rate at once (its cores; more share
                         // them); 0: every rank (a GPU each)
    Link within;         // between ranks of one machine
    Link within_op[COMM_NUM_OPS];  // one kind of collective's own fit (--calibrate), where beta > 0: a
                                   // reduction and a gather need not share one alpha and beta
    Link across;         // between machines
    Link host;           // between a rank's device and its host (--offload-optimizer's copies)
    double host_memory;  // bytes per second a machine's AdamW moves (--offload-optimizer), shared by its ranks
} Machine;

typedef struct {
    double compute;  // seconds of compute
    double comm;     // seconds the link is busy
    double exposed;  // seconds compute waits for the link
    double offload;  // seconds compute waits for the offloaded optimizer (host-link copies, the CPU's AdamW)
    double step;     // compute + exposed + offload
} StepTime;

// One simulated rank's timelines.
typedef struct SimClock {
    const Machine *machine;
    double flops_per_s;  // this rank's rate: the machine's, shared where its ranks outnumber its cores
    double host_memory;  // this rank's share of its machine's host memory rate (offloaded AdamW)
    double now;          // compute's clock, seconds
    double link_free;    // the link is busy until then
    double host_link_free, host_cpu_free;  // --offload-optimizer: the host link, the CPU busy until then
    StepTime spent;      // since the clock started (step: now)
} SimClock;

// Seconds of one collective of `bytes` among `ranks` ranks over `link` (comm.c, beside the bytes each
// collective moves: a collective's facts are in one file).
double collective_seconds(CommOp op, double bytes, int ranks, Link link);
// A clock at 0 for one rank of `world` on `machine`.
void sim_clock_init(SimClock *clock, const Machine *machine, int world);
// Compute of `flops` FLOPs.
void sim_compute(SimClock *clock, double flops);
// Queues a collective of kind `op` on `bytes` among `ranks` ranks (spanning
// machines or not) on the link; returns the time it completes.
double sim_collective(SimClock *clock, CommOp op, double bytes, int ranks, int spans_machines);
// Compute waits until `done`, if it is not there yet.
void sim_wait(SimClock *clock, double done);
// One tensor's offloaded update (above): its `bytes` of gradients start down the
// host link (host_link_free: when they are down).
void sim_offload_down(SimClock *clock, double bytes);
// Its AdamW, moving `adam_bytes` of host memory, once they are down (`down`);
// then its `bytes_up` of parameters up the link.
void sim_offload_update(SimClock *clock, double down, double adam_bytes, double bytes_up);
// Compute waits until every offloaded update is back.
void sim_offload_wait(SimClock *clock);
// Least-squares alpha and beta from n timed collectives: op[i] among ranks[i]
// ranks on `bytes[i]`, taking seconds[i]. Returns 0, or -1 if they do not
// determine both (fewer than two distinct sizes).
int fit_link(const CommOp *op, const int *ranks, const double *bytes, const double *seconds, int n, Link *link);

#endif
