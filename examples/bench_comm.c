// bench_comm: an nccl-tests-style sweep of every collective on the active
// backend. For each size from 1 KiB to 64 MiB: time per call (slowest rank),
// algorithm bandwidth (bytes / time) and bus bandwidth (algbw times the ring
// factor: 2(N-1)/N all-reduce, (N-1)/N reduce-scatter and all-gather, 1 otherwise).
// Where reductions go through the node's shared memory (comm/node.c), MPI's
// own reduction is timed beside each size in the same run (mpi_* columns).
//   mpirun -np 4 build/bench_comm [--max-mib 64]
// With --overlap-ms X it measures instead how much of an all-reduce the
// communication engine hides behind X ms of compute (sgemm on the rank's
// threads) done between its start and its wait; compare the engine's modes with
// SHARDLAB_COMM_ENGINE=thread|spin|inline. With --busy-threads K, rank 0 runs K
// threads that only spin while it measures: more runnable threads than cores, as
// on a machine with other work, where a rank that waits must not hold a core its
// peer needs.
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "comm/comm.h"
#include "run/threads.h"
#include "util/errors.h"
#include "util/timer.h"

static double run_once(Comm *comm, CommOp op, float *a, float *b, size_t count) {
    double start = timer_now();
    switch (op) {
    case COMM_ALL_REDUCE: comm_all_reduce(comm, a, count, DTYPE_FP32, COMM_SUM); break;
    case COMM_REDUCE_SCATTER: comm_reduce_scatter(comm, a, b, count, DTYPE_FP32, COMM_SUM); break;
    case COMM_ALL_GATHER: comm_all_gather(comm, a, b, count, DTYPE_FP32); break;
    case COMM_BROADCAST: comm_broadcast(comm, a, count, DTYPE_FP32, 0); break;
    case COMM_REDUCE: comm_reduce(comm, a, b, count, DTYPE_FP32, 0, COMM_SUM); break;
    case COMM_ALL_TO_ALL: comm_all_to_all(comm, a, b, count, DTYPE_FP32); break;
    case COMM_GATHER: comm_gather(comm, a, b, count, DTYPE_FP32, 0); break;
    default: fatal("bench_comm: no timing for %s", comm_op_names[op]);
    }
    return timer_now() - start;
}

// The slowest rank's mean time of one call over `iters` calls, after a warm-up.
static double time_op(Comm *comm, CommOp op, float *a, float *b, size_t count, int iters) {
    run_once(comm, op, a, b, count);
    comm_barrier(comm);
    double total = 0;
    for (int i = 0; i < iters; i++) total += run_once(comm, op, a, b, count);
    return comm_metric_max(comm, total / iters);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of n values (sorted in place).
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The stand-in for a unit's forward or backward: sgemms of 256 x 256 matrices.
#define GEMM_N 256

static void compute(const float *x, float *y, int reps) {
    for (int i = 0; i < reps; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, GEMM_N, GEMM_N, GEMM_N, 1.0f, x, GEMM_N, x, GEMM_N,
                    0.0f, y, GEMM_N);
}

// CPU seconds of every thread of this process.
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The slowest rank's mean of `seconds` over `iters` runs, in ms.
static double slowest_ms(Comm *comm, double seconds, int iters) { return 1e3 * comm_metric_max(comm, seconds / iters); }

// For each size: the all-reduce alone, the compute alone, and the compute run
// between the all-reduce's start and its wait, with the wait that remains.
static void bench_overlap(Comm *comm, float *a, size_t max_count, double overlap_ms) {
    int threads = threads_configure(comm->local_size, NULL);
    float *x = xcalloc(GEMM_N * GEMM_N, sizeof(float)), *y = xcalloc(GEMM_N * GEMM_N, sizeof(float));
    for (int i = 0; i < GEMM_N * GEMM_N; i++) x[i] = (float)(i % 7) * 0.01f;
    // how many sgemms take overlap_ms on this rank (the slowest rank's count, so all do the same work)
    compute(x, y, 2);
    double start = timer_now();
    compute(x, y, 20);
    double per_gemm = (timer_now() - start) / 20;
    int reps = (int)comm_metric_max(comm, overlap_ms * 1e-3 / per_gemm + 1);
    const char *mode = getenv("SHARDLAB_COMM_ENGINE");
    if (comm->rank == 0)
        printf("# overlap: all_reduce started, %d sgemms (%.1f ms) of compute on %d thread(s) per rank, then "
               "the wait; engine %s; mean of the slowest rank\n# %10s %10s %11s %16s %9s %9s %9s %12s\n",
               reps, 1e3 * reps * per_gemm, threads, comm->engine_thread ? (mode && *mode ? mode : "thread") : "inline",
               "bytes", "alone_ms", "compute_ms", "compute_comm_ms", "wait_ms", "hidden_%", "saved_ms", "comm_cpu_ms");
    const int iters = 10;
    for (size_t bytes = 1 << 20; bytes <= max_count * sizeof(float); bytes *= 4) {
        size_t count = bytes / sizeof(float);
        double alone = 0, computing = 0, overlapped = 0, waiting = 0, cpu_alone = 0, cpu_overlapped = 0;
        comm_all_reduce(comm, a, count, DTYPE_FP32, COMM_SUM);  // warm up
        for (int i = 0; i < iters; i++) {
            comm_barrier(comm);
            start = timer_now();
            comm_all_reduce(comm, a, count, DTYPE_FP32, COMM_SUM);
            alone += timer_now() - start;
            comm_barrier(comm);
            start = timer_now();
            double cpu = cpu_now();
            compute(x, y, reps);
            computing += timer_now() - start;
            cpu_alone += cpu_now() - cpu;
            comm_barrier(comm);
            start = timer_now();
            cpu = cpu_now();
            CommHandle h = comm_all_reduce_start(comm, a, count, DTYPE_FP32, COMM_SUM);
            compute(x, y, reps);
            double waited = timer_now();
            comm_wait(comm, &h);
            cpu_overlapped += cpu_now() - cpu;
            overlapped += waited - start;
            waiting += timer_now() - waited;
        }
        double alone_ms = slowest_ms(comm, alone, iters), wait_ms = slowest_ms(comm, waiting, iters);
        double compute_ms = slowest_ms(comm, computing, iters), overlapped_ms = slowest_ms(comm, overlapped, iters);
        double comm_cpu_ms = slowest_ms(comm, cpu_overlapped - cpu_alone, iters);
        double hidden = alone_ms > 0 ? 100 * (1 - wait_ms / alone_ms) : 100;
        // against the compute and then the blocking all-reduce, one after the other
        double saved_ms = compute_ms + alone_ms - overlapped_ms - wait_ms;
        if (comm->rank == 0)
            printf("  %10zu %10.2f %11.2f %16.2f %9.2f %9.0f %9.2f %12.2f\n", bytes, alone_ms, compute_ms, overlapped_ms,
                   wait_ms, hidden < 0 ? 0 : hidden, saved_ms, comm_cpu_ms);
    }
    free(x);
    free(y);
}

// Threads that spin until told to stop, each noting the CPU time it took.
typedef struct {
    atomic_int stop;
    int count;
    pthread_t *threads;
    double *cpu_s;  // (count)
} Busy;

typedef struct {
    Busy *busy;
    int index;
} BusyArg;

static void *spin_until_stopped(void *arg) {
    BusyArg *a = arg;
    volatile unsigned long spins = 0;
    while (!atomic_load(&a->busy->stop)) spins++;
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) fatal("clock_gettime: a thread's CPU time unavailable");
    a->busy->cpu_s[a->index] = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    free(a);
    return NULL;
}

static void busy_start(Busy *busy, int count) {
    atomic_init(&busy->stop, 0);
    busy->count = count;
    busy->threads = xcalloc((size_t)count + 1, sizeof *busy->threads);
    busy->cpu_s = xcalloc((size_t)count + 1, sizeof *busy->cpu_s);
    for (int k = 0; k < count; k++) {
        BusyArg *arg = xmalloc(sizeof *arg);
        *arg = (BusyArg){busy, k};
        int status = pthread_create(&busy->threads[k], NULL, spin_until_stopped, arg);
        if (status != 0) fatal("--busy-threads: cannot start thread %d: %s", k, strerror(status));
    }
}

// Stops the threads; returns the CPU seconds they took in all.
static double busy_stop(Busy *busy) {
    atomic_store(&busy->stop, 1);
    double total = 0;
    for (int k = 0; k < busy->count; k++) {
        int status = pthread_join(busy->threads[k], NULL);
        if (status != 0) fatal("--busy-threads: pthread_join: %s", strerror(status));
        total += busy->cpu_s[k];
    }
    free(busy->threads);
    free(busy->cpu_s);
    return total;
}

int main(int argc, char **argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    int max_mib = 64, rounds = 3, busy_threads = 0;
    float overlap_ms = 0;
    const CliOption options[] = {
        {"--max-mib", "M", CLI_INT, &max_mib, 1, 1 << 20, "largest message, MiB (default 64)"},
        {"--rounds", "R", CLI_INT, &rounds, 1, 1000,
         "time each size in R rounds, the node reduction and MPI's in turn within each (A B A B ...): a row gives "
         "the medians over the rounds and MPI's time over the node's with its spread (default 3)"},
        {"--overlap-ms", "X", CLI_FLOAT, &overlap_ms, 0.1, 1e5,
         "measure instead the all-reduce hidden behind X ms of compute, 1 MiB to M MiB"},
        {"--busy-threads", "K", CLI_INT, &busy_threads, 1, 64,
         "rank 0 runs K threads that spin while it measures: a machine with other work on its cores"},
    };
    CliSpec spec = {.synopsis = "[--max-mib M] [--rounds R] [--overlap-ms X] [--busy-threads K]   (under mpirun -np N)",
                    .about = "times every collective from 1 KiB to M MiB: time per call, algorithm and bus bandwidth",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    // each rank parses its own command line; the worst outcome (ERROR over HELP over
    // RUN) ends every rank alike, and the first rank with it says why
    CliResult parsed = cli_parse(&spec, argc, argv, 0);
    int worst = (int)comm_metric_max(&comm, parsed);
    if (worst != CLI_RUN) {
        int speaker = -(int)comm_metric_max(&comm, -((int)parsed == worst ? comm.rank : comm.world));
        if (comm.rank == speaker) cli_parse(&spec, argc, argv, 1);
        comm_finalize(&comm);
        return worst == CLI_HELP ? 0 : 1;
    }
    // every rank must run the same message sizes, or the collectives would not match
    if (comm_metric_max(&comm, max_mib) != -comm_metric_max(&comm, -max_mib))
        fatal("--max-mib differs across ranks (rank %d has %d): give every rank the same", comm.rank, max_mib);
    if (comm_metric_max(&comm, rounds) != -comm_metric_max(&comm, -rounds))
        fatal("--rounds differs across ranks (rank %d has %d): give every rank the same", comm.rank, rounds);
    if (comm_metric_max(&comm, overlap_ms) != -comm_metric_max(&comm, -overlap_ms))
        fatal("--overlap-ms differs across ranks (rank %d has %g): give every rank the same", comm.rank, overlap_ms);
    if (comm_metric_max(&comm, busy_threads) != -comm_metric_max(&comm, -busy_threads))
        fatal("--busy-threads differs across ranks (rank %d has %d): give every rank the same", comm.rank,
              busy_threads);
    if (comm_metric_max(&comm, busy_threads && overlap_ms > 0))
        fatal("--busy-threads: the sweep's option; --overlap-ms measures without it");
    size_t max_count = (size_t)max_mib * 1024 * 1024 / sizeof(float);
    float *a = xcalloc(max_count, sizeof(float)), *b = xcalloc(max_count, sizeof(float));
    if (overlap_ms > 0) {
        bench_overlap(&comm, a, max_count, overlap_ms);
        free(a);
        free(b);
        comm_finalize(&comm);
        return 0;
    }
    int N = comm.world, node = comm_node_shared(&comm) && comm.node_reductions;
    if (comm.rank == 0)
        printf("# bench_comm: %d ranks, backend %s%s; medians over %d round(s)%s\n", N, comm_backend_name(&comm),
               node ? "; reductions through the node's shared memory, MPI's own beside them in turn (mpi_*)" : "",
               rounds, busy_threads ? "; threads spinning beside the ranks (--busy-threads)" : "");
    Busy busy;
    if (comm.rank == 0) busy_start(&busy, busy_threads);
    for (int op = 0; op < COMM_BARRIER; op++) {
        double factor = op == COMM_ALL_REDUCE ? 2.0 * (N - 1) / N
                      : (op == COMM_REDUCE_SCATTER || op == COMM_ALL_GATHER || op == COMM_ALL_TO_ALL ||
                         op == COMM_GATHER) ? (double)(N - 1) / N
                                            : 1.0;
        int both = node && (op == COMM_ALL_REDUCE || op == COMM_REDUCE_SCATTER || op == COMM_REDUCE);
        if (comm.rank == 0)
            printf("# %s\n# %10s %12s %12s %12s%s\n", comm_op_names[op], "bytes", "time_us", "algbw_GB/s", "busbw_GB/s",
                   both ? "  mpi_time_us mpi_busbw_GB/s  mpi/node[lowest-highest]" : "");
        for (size_t bytes = 1024; bytes <= max_count * sizeof(float); bytes *= 4) {
            size_t count = bytes / sizeof(float);
            count -= count % (size_t)N;  // reduce-scatter, the gathers and all-to-all need multiples of N
            int calls = count * sizeof(float) <= (1 << 20) ? 50 : 5, iters = (calls + rounds - 1) / rounds;
            double *times = xcalloc((size_t)rounds, sizeof(double)), *mpi = xcalloc((size_t)rounds, sizeof(double));
            double *ratio = xcalloc((size_t)rounds, sizeof(double));
            for (int r = 0; r < rounds; r++) {
                times[r] = time_op(&comm, op, a, b, count, iters);
                if (both) {  // the same call on MPI's own reduction, right after: a pair
                    comm.node_reductions = 0;
                    mpi[r] = time_op(&comm, op, a, b, count, iters);
                    comm.node_reductions = 1;
                    ratio[r] = mpi[r] / times[r];
                }
            }
            double t = median(times, rounds), busbw = (double)count * sizeof(float) / t / 1e9 * factor;
            if (comm.rank == 0) printf("  %10zu %12.1f %12.3f %12.3f", count * sizeof(float), 1e6 * t, busbw / factor, busbw);
            if (both && comm.rank == 0) {
                double m = median(mpi, rounds), q = median(ratio, rounds);  // ratio sorted: its ends are the spread
                printf(" %12.1f %14.3f  %.2f[%.2f-%.2f]", 1e6 * m, (double)count * sizeof(float) / m / 1e9 * factor, q,
                       ratio[0], ratio[rounds - 1]);
            }
            if (comm.rank == 0) printf("\n");
            free(times);
            free(mpi);
            free(ratio);
        }
    }
    if (comm.rank == 0) {
        double cpu_s = busy_stop(&busy);
        if (busy_threads) printf("# %d busy thread(s) took %.2f s of CPU\n", busy_threads, cpu_s);
    }
    free(a);
    free(b);
    comm_finalize(&comm);
    return 0;
}
