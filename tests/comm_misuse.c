// comm_misuse MODE: misuses the communication layer on purpose, for
// tests/run_tests.sh to check that each misuse ends every rank with a clear
// error instead of a hang. Modes: counts, null, root, divisible, int8-sum (a sum
// of a quantized wire's bytes), rank-exit, rank-exit-in-flight (rank 1 exits while
// its engine carries a collective).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "util/errors.h"

int main(int argc, char **argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    comm.debug_checks = 1;
    if (argc != 2) fatal("usage: comm_misuse counts|null|root|divisible|int8-sum|split-past-world|rank-exit|rank-exit-in-flight");
    const char *mode = argv[1];
    float buf[64] = {0}, out[64];
    if (strcmp(mode, "counts") == 0) {
        comm_all_reduce(&comm, buf, comm.rank == 0 ? 8 : 16, DTYPE_FP32, COMM_SUM);
    } else if (strcmp(mode, "null") == 0) {
        comm_all_reduce(&comm, comm.rank == comm.world - 1 ? NULL : buf, 8, DTYPE_FP32, COMM_SUM);
    } else if (strcmp(mode, "root") == 0) {
        comm_broadcast(&comm, buf, 8, DTYPE_FP32, comm.world + 2);
    } else if (strcmp(mode, "divisible") == 0) {
        comm_reduce_scatter(&comm, buf, out, (size_t)comm.world * 4 + 1, DTYPE_FP32, COMM_SUM);
    } else if (strcmp(mode, "int8-sum") == 0) {
        comm_reduce_scatter(&comm, buf, out, (size_t)comm.world * 4, DTYPE_INT8, COMM_SUM);
    } else if (strcmp(mode, "split-past-world") == 0) {  // every rank a member, the group one rank too long
        Comm group;
        comm_split(&comm, 0, 1, comm.world + 1, 0, &group);
    } else if (strcmp(mode, "rank-exit") == 0) {
        if (comm.rank == 1) fatal("rank 1 stops on purpose");
        sleep(1);
        comm_all_reduce(&comm, buf, 8, DTYPE_FP32, COMM_SUM);  // the others would wait here forever
        comm_barrier(&comm);
    } else if (strcmp(mode, "rank-exit-in-flight") == 0) {
        size_t n = (size_t)1 << 22;
        float *big = xcalloc(n, sizeof(float));
        CommHandle h = comm_all_reduce_start(&comm, big, n, DTYPE_FP32, COMM_SUM);
        if (comm.rank == 1) fatal("rank 1 stops on purpose, its all-reduce in flight");
        sleep(1);
        comm_wait(&comm, &h);  // the others' engines would wait for rank 1 forever
        comm_barrier(&comm);
        free(big);
    } else {
        fatal("unknown mode '%s'", mode);
    }
    comm_finalize(&comm);
    return 0;
}
