// test_comm_gpu: the collectives of comm.h on device buffers (CUDA build),
// under mpirun: NCCL with one rank per GPU, MPI staged through host memory when
// ranks share a GPU. Each result is compared with the same reduction done on
// the host. The values are small integers and halves, so every sum is exact
// in any order and a result must match bit for bit; one rank's average must
// return its input unchanged, also for values that are not exact.
//   mpirun -np N build/cuda/test_comm_gpu
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "util/errors.h"

static int failures;

static void expect_equal(const Comm *comm, const char *what, const float *device_result, const float *want,
                         size_t count) {
    float *got = xmalloc(count * sizeof(float));
    device_to_host(got, device_result, count);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < count; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    if (bad) {
        failures++;
        printf("FAIL rank %d: %s: %zu of %zu values differ, first at %zu: %.9g != %.9g\n", comm->rank, what, bad,
               count, first, got[first], want[first]);
    }
    free(got);
}

// value i of rank r: a small integer plus a half, the same formula on every rank
static float value_of(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 31) - 15) * 0.5f; }

static MemAccount buffers;  // what the device buffers below take

static float *upload(const float *host, size_t count) {
    float *device = device_alloc(&buffers, MEM_COMM_BUFFERS, count);
    device_from_host(device, host, count);
    return device;
}

int main(int argc, char **argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    device_init(comm.local_rank);
    comm_use_device_buffers(&comm, device_count());
    int N = comm.world, r = comm.rank;
    size_t part = 1000 + 3, count = part * (size_t)N;
    float *mine = xmalloc(count * sizeof(float)), *sum = xmalloc(count * sizeof(float));
    float *avg = xmalloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        mine[i] = value_of(r, i);
        sum[i] = 0;
        for (int q = 0; q < N; q++) sum[i] += value_of(q, i);
        avg[i] = sum[i] / (float)N;
    }
    int exact_average = (N & (N - 1)) == 0;  // dividing by a power of two is exact

    float *buf = upload(mine, count);
    comm_all_reduce(&comm, buf, count, DTYPE_FP32, COMM_SUM);
    expect_equal(&comm, "all_reduce sum", buf, sum, count);
    device_from_host(buf, mine, count);
    comm_all_reduce(&comm, buf, count, DTYPE_FP32, COMM_AVG);
    if (exact_average) expect_equal(&comm, "all_reduce avg", buf, avg, count);

    float *recv = device_alloc(&buffers, MEM_COMM_BUFFERS, count);
    comm_reduce_scatter(&comm, buf = upload(mine, count), recv, count, DTYPE_FP32, COMM_SUM);
    expect_equal(&comm, "reduce_scatter sum", recv, sum + (size_t)r * part, part);
    comm_reduce_scatter(&comm, buf, recv, count, DTYPE_FP32, COMM_AVG);
    if (exact_average) expect_equal(&comm, "reduce_scatter avg", recv, avg + (size_t)r * part, part);

    float *gathered = device_alloc(&buffers, MEM_COMM_BUFFERS, count);
    float *everyone = xmalloc(count * sizeof(float));
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) everyone[(size_t)q * part + i] = value_of(q, i);
    float *slice = upload(everyone + (size_t)r * part, part);
    comm_all_gather(&comm, slice, gathered, count, DTYPE_FP32);
    expect_equal(&comm, "all_gather", gathered, everyone, count);
    device_from_host(gathered, mine, count);  // overwritten at the root only
    comm_gather(&comm, slice, r == N - 1 ? gathered : NULL, count, DTYPE_FP32, N - 1);
    if (r == N - 1) expect_equal(&comm, "gather", gathered, everyone, count);

    int root = N - 1;
    float *root_values = xmalloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) root_values[i] = value_of(root, i);
    device_from_host(buf, mine, count);
    comm_broadcast(&comm, buf, count, DTYPE_FP32, root);
    expect_equal(&comm, "broadcast", buf, root_values, count);

    device_from_host(buf, mine, count);
    comm_reduce(&comm, buf, r == root ? buf : NULL, count, DTYPE_FP32, root, COMM_SUM);
    if (r == root) expect_equal(&comm, "reduce sum in place", buf, sum, count);

    if (N == 1) {  // one rank: an average is its input, bit for bit, whatever the values
        for (size_t i = 0; i < count; i++) mine[i] = sinf((float)i) * 1e-3f + 0.1f;
        device_from_host(buf, mine, count);
        comm_all_reduce(&comm, buf, count, DTYPE_FP32, COMM_AVG);
        expect_equal(&comm, "one rank: all_reduce avg", buf, mine, count);
        device_from_host(buf, mine, count);
        comm_reduce_scatter(&comm, buf, recv, count, DTYPE_FP32, COMM_AVG);
        expect_equal(&comm, "one rank: reduce_scatter avg", recv, mine, count);
        comm_all_gather(&comm, buf, gathered, count, DTYPE_FP32);
        expect_equal(&comm, "one rank: all_gather", gathered, mine, count);
    }
    int total = (int)comm_metric_max(&comm, failures);
    if (r == 0) printf("comm_gpu: %d ranks, %s\n", N, total ? "FAILED" : "all collectives match");
    comm_finalize(&comm);
    return total ? 1 : 0;
}
