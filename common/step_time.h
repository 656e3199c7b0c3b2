// step_time.h: a model of one training step's time, for build/plan --time.
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
// A step is replayed on two timelines, the rank's compute and its link: each
// strategy starts and waits for its collectives where its code does (the same
// schedule as its hooks, prefetch included), a collective runs on the link
// once the link is free, and the time compute spends waiting is the exposed
// communication. Compute per unit is its share of the model's FLOPs at the
// rank's rate; the optimizer step and the host's own overheads are left out.
#ifndef SHARDLAB_STEP_TIME_H
#define SHARDLAB_STEP_TIME_H

#include "../models/gpt2.h"
#include "comm.h"

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
} Machine;

typedef enum { STEP_DDP, STEP_ZERO1, STEP_ZERO2, STEP_ZERO3, STEP_FSDP, STEP_NUM_STRATEGIES } StepStrategy;
extern const char *const step_strategy_names[STEP_NUM_STRATEGIES];  // "ddp", "zero1", ...

typedef struct {
    int ranks;        // N
    int rows;         // B/N sequences per rank
    int seq;          // T
    int prefetch;     // ZeRO-3, FSDP: --prefetch K (at most L)
    int shard_group;  // FSDP: --shard-group S (N: none)
    size_t bytes;     // of a parameter or gradient element (4: fp32, 2: bf16)
} StepSetup;

typedef struct {
    double compute;  // seconds of compute
    double comm;     // seconds the link is busy
    double exposed;  // seconds compute waits for the link
    double step;     // compute + exposed
} StepTime;

// Seconds of one collective of `bytes` among `ranks` ranks over `link`.
double collective_seconds(CommOp op, double bytes, int ranks, Link link);
// One step of `strategy` on `machine` (see the top).
StepTime step_time(const GPT2Layout *layout, StepStrategy strategy, const StepSetup *setup, const Machine *machine);
// Least-squares alpha and beta from n timed collectives: op[i] among ranks[i]
// ranks on `bytes[i]`, taking seconds[i]. Returns 0, or -1 if they do not
// determine both (fewer than two distinct sizes).
int fit_link(const CommOp *op, const int *ranks, const double *bytes, const double *seconds, int n, Link *link);

#endif
