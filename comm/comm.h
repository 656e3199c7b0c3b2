// comm.h: the only way ranks talk to each other. Two real engines sit behind it:
//   MPI  - launches the ranks (mpirun), carries collectives on host memory, and
//          bootstraps NCCL;
//   NCCL - carries collectives on device memory, one GPU per rank (GPU build);
// and a simulated network for build/plan's dry run: one rank of N, whose
// collectives are counted, move nothing and take their time on a virtual clock
// (comm_init_simulated; comm/sim_clock.h).
//
// Every call is counted per collective: calls, elements, the bytes this rank
// sends and receives under the ring model below, and the wall time this rank
// spent waiting. With S the bytes of the full buffer and N ranks:
//
//   all_reduce      sent = recv = 2 (N-1)/N * S      (reduce-scatter + all-gather)
//   reduce_scatter  sent = recv =   (N-1)/N * S      (S = the whole input)
//   all_gather      sent = recv =   (N-1)/N * S      (S = the whole output)
//   all_to_all      sent = recv =   (N-1)/N * S      (S = the whole input: block r to rank r)
//   gather          every rank but the root sends S/N, the root receives (N-1)/N * S
//                   (S = the whole output: rank r's part at r, at the root)
//   broadcast       chain root -> root+1 -> ...: every rank but the chain's last
//                   sends S, every rank but the root receives S
//   reduce          chain root+1 -> ... -> root: every rank but the root sends
//                   S, every rank but root+1 receives S
//
// These are the bytes an optimal ring/chain algorithm moves (the model behind
// nccl-tests' bus bandwidth), not a trace of what MPI's chosen algorithm did;
// what the node reductions really moved is counted beside them (node_bytes_*).
//
// On host buffers (MPI) each Comm has a communication engine: a thread that runs
// its collectives one after another, in the order they were started, on a
// communicator of its own, the way a CUDA stream runs kernels. comm_*_start
// queues a collective and returns at once; the thread carries it while the rank
// computes; comm_wait blocks until it is complete. A blocking collective is a
// start and a wait, so every collective of a Comm goes through its one queue in
// program order, the order MPI needs on all ranks (a group from comm_split has
// its own queue: its collectives order among themselves). SHARDLAB_COMM_ENGINE=inline
// (or an MPI without MPI_THREAD_MULTIPLE) runs them on the calling thread
// instead, where they advance only inside MPI calls (comm_progress, comm_wait).
// A Comm belongs to one calling thread: the rank's compute thread.
#ifndef SHARDLAB_COMM_H
#define SHARDLAB_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "device/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COMM_ALL_REDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER, COMM_BROADCAST, COMM_REDUCE, COMM_ALL_TO_ALL,
    COMM_GATHER, COMM_BARRIER, COMM_NUM_OPS
} CommOp;

typedef enum { COMM_SUM, COMM_AVG } CommReduceOp;
// What carries a group's collectives: MPI, NCCL or the simulated network (comm/backend.h).
typedef struct CommBackend CommBackend;

typedef struct {
    uint64_t calls;
    uint64_t elements;
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    // The bytes that actually crossed between this rank and the others, for the
    // collectives whose algorithm shardlab runs itself: the node reductions
    // (comm/node.h), counted as they read each other's shared memory (in: read
    // from the others; out: read by them). MPI's and NCCL's own algorithms do not
    // say what they moved: their calls are not counted here.
    uint64_t node_calls;
    uint64_t node_bytes_in;
    uint64_t node_bytes_out;
    // Wall time the calling thread spent blocked in blocking calls and comm_wait:
    // the communication that compute did not hide. NCCL's waits do not block the
    // host (the compute stream waits on the GPU), so they count next to nothing.
    double seconds;
} CommCounter;

typedef struct {
    CommCounter ops[COMM_NUM_OPS];
} CommStats;

typedef struct CommNccl CommNccl;
typedef struct CommSim CommSim;
typedef struct CommEngine CommEngine;
struct SimClock;
typedef struct CommLog CommLog;

typedef struct Comm {
    int rank, world;     // within this group: MPI_COMM_WORLD, or a group made by comm_split
    int local_rank;      // rank among the ranks on this node (picks the GPU)
    int local_size;      // ranks on this node
    const CommBackend *backend;  // what carries the group's collectives (comm/backend.h)
    int staged;          // MPI on device buffers: copy through pinned host memory
    int debug_checks;    // verify arguments agree across ranks before each call
    int node_reductions; // reductions of host buffers through the node's shared memory when the
                         // group is on one node (comm/node.h); 0: MPI's own. SHARDLAB_COMM_REDUCE=mpi
                         // sets 0 at init; bench_comm sets it per run to time both
    CommStats stats;     // every collective of this group, and of the groups split from it
    CommStats across;    // the part of stats that crossed between replica groups (comm_split's `across`)
    CommStats machines;  // simulated network: the part of stats among ranks of more than one machine
    int spans_machines;  // simulated network: this group's ranks sit on more than one machine (sim.c)
    struct Comm *parent; // the group this one was split from (comm_split), or NULL
    int is_across;       // this group joins ranks of different replica groups
    CommNccl *nccl;      // NCCL state, GPU build only
    CommSim *sim;        // the simulated network's state (comm_sim_backend), else NULL
    CommEngine *engine;  // the MPI collectives' queue, communicator and thread
    int engine_thread;   // 1: a thread carries them; 0: the calling thread does
    CommLog *log;        // the collectives kept for the trace (comm_record), or NULL
    int started_mpi;     // comm_init called MPI_Init (so comm_finalize ends it)
} Comm;

// An in-flight non-blocking collective; finish it with comm_wait.
typedef struct {
    int active;
    CommOp op;
    CommReduceOp reduce_op;
    DType dtype;          // of the elements
    void *result;         // where the average must be applied on completion
    size_t result_count;  // 0: nothing to divide on this rank
    size_t count;         // elements of the whole buffer, as passed to the call
    double issued;        // timer_now() when it was started
    void *request;        // backend request (the engine's operation or a CUDA event)
    void *staged_send;    // staged MPI: host copies of the buffers, and where the
    void *staged_recv;    // result goes back to on the device
    void *device_recv;
    size_t staged_recv_count;
    double sim_done;      // simulated network: when it completes, on the virtual clock
} CommHandle;

extern const char *const comm_op_names[COMM_NUM_OPS];

// Starts MPI if needed (a program started without mpirun is rank 0 of 1).
// debug_checks also turns on with the environment variable SHARDLAB_COMM_DEBUG=1.
void comm_init(Comm *comm, int *argc, char ***argv);
void comm_finalize(Comm *comm);
// Rank `rank` of `world` on a simulated network (no MPI): collectives check
// their arguments and count their bytes as on MPI, move nothing, and cost their
// alpha-beta time on `clock` (comm/sim_clock.h). For build/plan's dry run.
void comm_init_simulated(Comm *comm, int rank, int world, struct SimClock *clock);
// The group of the parent's ranks first, first + stride, ..., first + (size-1)
// stride (this rank among them), ranked in that order, with an engine of its own
// (its collectives order among themselves, not with the parent's), on the
// parent's backend. Every rank of `parent` must call it, each with its own
// group. Its collectives count in its own stats and in the parent's (and, when
// `across`, in the parent's `across` too): hybrid sharding's replica groups are.
void comm_split(Comm *parent, int first, int stride, int size, int across, Comm *group);
// Ends a group made by comm_split (every rank of the group calls it).
void comm_free_group(Comm *group);
// Collectives will get device buffers (CUDA build): NCCL when every rank on the
// node has a GPU of its own, else MPI staged through pinned host memory (NCCL
// refuses two ranks on one GPU). Says which on rank 0.
void comm_use_device_buffers(Comm *comm, int gpus_on_node);

// Buffers hold `count` elements of `dtype` (dtype.h): int8 (a quantized wire's
// bytes: all-gathers, all-to-alls and broadcasts only), fp32, or bf16, whose sums
// are worked out in fp32 and rounded, one rounding per pairwise sum. The order of
// the additions: rank order 0, 1, ..., N-1, whatever the size, where the group is
// on one node, the engine runs its thread (not inline) and node_reductions is on
// (comm/node.h); else MPI's algorithm's; NCCL its own.
//
// In place: every rank ends with the sum (or average) over ranks of buf.
void comm_all_reduce(Comm *comm, void *buf, size_t count, DType dtype, CommReduceOp op);
// send has `count` elements (divisible by N); rank r receives the reduced
// elements [r*count/N, (r+1)*count/N) into recv.
void comm_reduce_scatter(Comm *comm, const void *send, void *recv, size_t count, DType dtype, CommReduceOp op);
// Each rank contributes count/N elements (count divisible by N); recv gets all
// `count`, rank r's part at offset r*count/N.
void comm_all_gather(Comm *comm, const void *send, void *recv, size_t count, DType dtype);
void comm_broadcast(Comm *comm, void *buf, size_t count, DType dtype, int root);
// send and recv have `count` elements (divisible by N): block r of send (count/N
// elements) goes to rank r, and block q of recv comes from rank q. Nothing summed.
void comm_all_to_all(Comm *comm, const void *send, void *recv, size_t count, DType dtype);
// Each rank contributes count/N elements (count divisible by N); recv (used only at
// root) gets all `count`, rank r's part at offset r*count/N. Nothing summed.
void comm_gather(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root);
// recv (used only at root) gets the sum or average of send over ranks; the root
// may pass send == recv to reduce in place.
void comm_reduce(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root, CommReduceOp op);
void comm_barrier(Comm *comm);

CommHandle comm_all_reduce_start(Comm *comm, void *buf, size_t count, DType dtype, CommReduceOp op);
CommHandle comm_reduce_scatter_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype,
                                     CommReduceOp op);
CommHandle comm_all_gather_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype);
CommHandle comm_broadcast_start(Comm *comm, void *buf, size_t count, DType dtype, int root);
CommHandle comm_all_to_all_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype);
CommHandle comm_gather_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root);
CommHandle comm_reduce_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root,
                             CommReduceOp op);
// Waits for the handle's collective, if it is in flight: returns 1 if it was, 0
// if there was nothing to wait for (the one idiom: `if (!comm_wait(...)) ...`).
int comm_wait(Comm *comm, CommHandle *handle);
// Lets an in-flight collective advance without waiting for it. Needed only when
// the collectives run on the calling thread (engine_thread 0): MPI then moves a
// non-blocking collective forward only while the program is inside an MPI call.
// With the engine's thread, and with NCCL, it does nothing.
void comm_progress(Comm *comm, CommHandle *handle);
// 1 when the collective has completed (comm_wait will not block; it still has to
// be called), 0 while it is in flight. Never blocks; with the engine's thread it
// makes no MPI call. NCCL: asks the completion event.
int comm_test(Comm *comm, CommHandle *handle);

// The sum over ranks of one double, on every rank (on the host, through MPI,
// whatever the backend). Counted as an all_reduce of 2 elements: 8 bytes.
double comm_all_reduce_double(Comm *comm, double value);

// Averages a value over ranks for logging; not counted as training traffic.
double comm_metric_average(Comm *comm, double value);
// Maximum over ranks, for logging; not counted.
double comm_metric_max(Comm *comm, double value);

// Rank 0 receives every rank's `bytes` bytes (other counts allowed per rank),
// concatenated in rank order into a malloc'ed buffer; *counts[r] tells each
// rank's size. Other ranks get NULL. For logs and traces; not counted.
void *comm_metric_gather(Comm *comm, const void *bytes, size_t count, size_t **counts);

// One collective of this rank from start to completion, for the step timeline
// (trace_attach_comm in trace.h puts them on a lane of their own).
typedef struct {
    CommOp op;
    size_t count;   // elements of the whole buffer
    double issued;  // timer_now() when the rank started it
    double done;    // when it completed: the engine finished it, or the GPU did (NCCL)
    double waited;  // when the rank called comm_wait for it (blocking forms: right after issue)
} CommRecord;

// While on, every collective the rank waits for is kept as a CommRecord (at most
// the last 65536 between two comm_clear_records). Off by default; off drops them.
void comm_record(Comm *comm, int on);
// The records kept since the last comm_clear_records, in the order waited for.
// NCCL: reads the completion times from their CUDA events, waiting for those.
const CommRecord *comm_records(Comm *comm, size_t *count);
void comm_clear_records(Comm *comm);

// 1 when the group's reductions of host buffers can go through the node's shared
// memory (every rank on one node, the engine's thread running; comm/node.h).
int comm_node_shared(const Comm *comm);
// What carries the group's collectives: "mpi", "nccl" or "sim".
const char *comm_backend_name(const Comm *comm);

void comm_stats_reset(Comm *comm);
// The counters of `after` minus those of `before`.
CommStats comm_stats_diff(const CommStats *after, const CommStats *before);
// Bytes this rank sends and receives for one collective of `count` elements of
// `dtype`, by the formulas above (used by the counters and by the tests and the planner).
void comm_ring_bytes(CommOp op, size_t count, DType dtype, int rank, int world, int root, uint64_t *sent,
                     uint64_t *recv);

#ifdef __cplusplus
}
#endif

#endif
