// bench_comm: an nccl-tests-style sweep of every collective on the active
// backend. For each size from 1 KiB to 64 MiB: time per call (slowest rank),
// algorithm bandwidth (bytes / time) and bus bandwidth (algbw times the ring
// factor: 2(N-1)/N all-reduce, (N-1)/N reduce-scatter and all-gather, 1 otherwise).
//   mpirun -np 4 build/bench_comm [--max-mib 64]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util/cli.h"
#include "../common/comm.h"
#include "../common/util/errors.h"
#include "../common/util/timer.h"

static double run_once(Comm *comm, CommOp op, float *a, float *b, size_t count) {
    double start = timer_now();
    switch (op) {
    case COMM_ALL_REDUCE: comm_all_reduce(comm, a, count, COMM_SUM); break;
    case COMM_REDUCE_SCATTER: comm_reduce_scatter(comm, a, b, count, COMM_SUM); break;
    case COMM_ALL_GATHER: comm_all_gather(comm, a, b, count); break;
    case COMM_BROADCAST: comm_broadcast(comm, a, count, 0); break;
    case COMM_REDUCE: comm_reduce(comm, a, b, count, 0, COMM_SUM); break;
    default: break;
    }
    return timer_now() - start;
}

int main(int argc, char **argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    int max_mib = 64;
    const CliOption options[] = {
        {"--max-mib", "M", CLI_INT, &max_mib, 1, 1 << 20, "largest message, MiB (default 64)"},
    };
    CliSpec spec = {.synopsis = "[--max-mib M]   (under mpirun -np N)",
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
    size_t max_count = (size_t)max_mib * 1024 * 1024 / sizeof(float);
    float *a = xcalloc(max_count, sizeof(float)), *b = xcalloc(max_count, sizeof(float));
    int N = comm.world;
    if (comm.rank == 0) printf("# bench_comm: %d ranks, backend %s\n", N, comm.backend == COMM_BACKEND_NCCL ? "nccl" : "mpi");
    for (int op = 0; op < COMM_BARRIER; op++) {
        double factor = op == COMM_ALL_REDUCE ? 2.0 * (N - 1) / N
                      : (op == COMM_REDUCE_SCATTER || op == COMM_ALL_GATHER) ? (double)(N - 1) / N : 1.0;
        if (comm.rank == 0) printf("# %s\n# %10s %12s %12s %12s\n", comm_op_names[op], "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
        for (size_t bytes = 1024; bytes <= max_count * sizeof(float); bytes *= 4) {
            size_t count = bytes / sizeof(float);
            count -= count % (size_t)N;  // reduce-scatter and all-gather need multiples of N
            int iters = bytes <= (1 << 20) ? 50 : 5;
            run_once(&comm, op, a, b, count);  // warm up
            comm_barrier(&comm);
            double total = 0;
            for (int i = 0; i < iters; i++) total += run_once(&comm, op, a, b, count);
            double t = comm_metric_max(&comm, total / iters);
            double algbw = (double)count * sizeof(float) / t / 1e9;
            if (comm.rank == 0) printf("  %10zu %12.1f %12.3f %12.3f\n", count * sizeof(float), 1e6 * t, algbw, algbw * factor);
        }
    }
    free(a);
    free(b);
    comm_finalize(&comm);
    return 0;
}
