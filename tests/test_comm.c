// The communication layer under mpirun -np 1..4: every collective on
// integer-valued floats (and bf16), checked exactly on every rank; non-blocking calls
// overlapped with work; counters against the ring formulas written out by hand;
// the engine (collectives completing in the background and in order, results
// bitwise those of MPI's own non-blocking calls); the records and the trace's
// collective lane. SHARDLAB_COMM_ENGINE picks the engine's mode, as in training.
#include <check.h>
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "run/trace.h"
#include "util/timer.h"

static Comm comm;

// Arithmetic that makes no MPI call, to run while a collective is in flight.
static double work(int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (double)(i % 13) * 0.5;
    return acc;
}

START_TEST(test_all_reduce_sum_and_average) {
    int N = comm.world, r = comm.rank;
    size_t n = 1001;  // not a multiple of N
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(r + 1) + (float)i;
    comm_all_reduce(&comm, buf, n, DTYPE_FP32, COMM_SUM);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(buf[i], (float)(N * (N + 1) / 2) + (float)(N * i));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(2 * r) + (float)i;
    comm_all_reduce(&comm, buf, n, DTYPE_FP32, COMM_AVG);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(buf[i], (float)(N - 1) + (float)i);
    free(buf);
}
END_TEST

START_TEST(test_reduce_scatter) {
    int N = comm.world, r = comm.rank;
    size_t part = 37, n = part * N;
    float *send = malloc(n * sizeof(float)), *recv = malloc(part * sizeof(float));
    for (size_t j = 0; j < n; j++) send[j] = (float)(r * 1000) + (float)j;
    comm_reduce_scatter(&comm, send, recv, n, DTYPE_FP32, COMM_SUM);
    for (size_t i = 0; i < part; i++)
        ck_assert_float_eq(recv[i], (float)(1000 * N * (N - 1) / 2) + (float)(N * (r * part + i)));
    comm_reduce_scatter(&comm, send, recv, n, DTYPE_FP32, COMM_AVG);
    for (size_t i = 0; i < part; i++)
        ck_assert_float_eq(recv[i], (float)(1000 * N * (N - 1) / 2) / N + (float)(r * part + i));
    free(send);
    free(recv);
}
END_TEST

START_TEST(test_all_gather) {
    int N = comm.world, r = comm.rank;
    size_t part = 29;
    float *send = malloc(part * sizeof(float)), *recv = malloc(part * N * sizeof(float));
    for (size_t i = 0; i < part; i++) send[i] = (float)(r * 100) + (float)i;
    comm_all_gather(&comm, send, recv, part * N, DTYPE_FP32);
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) ck_assert_float_eq(recv[q * part + i], (float)(q * 100) + (float)i);
    free(send);
    free(recv);
}
END_TEST

// Block q of my send goes to rank q; block q of my recv came from rank q. Int8 bytes
// travel as they are (a quantized wire), and cannot be summed.
START_TEST(test_all_to_all) {
    int N = comm.world, r = comm.rank;
    size_t part = 13;
    float *send = calloc(part * N, sizeof(float)), *recv = calloc(part * N, sizeof(float));
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) send[q * part + i] = (float)(r * 1000 + q * 100) + (float)i;
    comm_all_to_all(&comm, send, recv, part * N, DTYPE_FP32);
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) ck_assert_float_eq(recv[q * part + i], (float)(q * 1000 + r * 100) + (float)i);
    int8_t *bytes = malloc(7 * (size_t)N), *got = malloc(7 * (size_t)N);
    for (int q = 0; q < N; q++)
        for (int i = 0; i < 7; i++) bytes[q * 7 + i] = (int8_t)(r * 16 + q * 4 + i - 64);
    CommHandle h = comm_all_to_all_start(&comm, bytes, got, 7 * (size_t)N, DTYPE_INT8);
    comm_wait(&comm, &h);
    for (int q = 0; q < N; q++)
        for (int i = 0; i < 7; i++) ck_assert_int_eq(got[q * 7 + i], (int8_t)(q * 16 + r * 4 + i - 64));
    free(send), free(recv), free(bytes), free(got);
}
END_TEST

// Rank q's part lands at offset q of the root's recv, from every root; int8 bytes as they are (qgZ's
// wires on ZeRO-3); other ranks pass no recv.
START_TEST(test_gather) {
    int N = comm.world, r = comm.rank;
    size_t part = 11;
    float *send = calloc(part, sizeof(float)), *recv = calloc(part * N, sizeof(float));
    int8_t bytes[5], *got = malloc(5 * (size_t)N);
    for (int root = 0; root < N; root++) {
        for (size_t i = 0; i < part; i++) send[i] = (float)(r * 1000 + root * 100) + (float)i;
        comm_gather(&comm, send, r == root ? recv : NULL, part * N, DTYPE_FP32, root);
        for (int q = 0; r == root && q < N; q++)
            for (size_t i = 0; i < part; i++) ck_assert_float_eq(recv[q * part + i], (float)(q * 1000 + root * 100) + (float)i);
        for (int i = 0; i < 5; i++) bytes[i] = (int8_t)(r * 16 + root * 4 + i - 64);
        CommHandle h = comm_gather_start(&comm, bytes, r == root ? got : NULL, 5 * (size_t)N, DTYPE_INT8, root);
        comm_wait(&comm, &h);
        for (int q = 0; r == root && q < N; q++)
            for (int i = 0; i < 5; i++) ck_assert_int_eq(got[q * 5 + i], (int8_t)(q * 16 + root * 4 + i - 64));
    }
    free(send), free(recv), free(got);
}
END_TEST

START_TEST(test_broadcast_from_every_root) {
    int N = comm.world, r = comm.rank;
    for (int root = 0; root < N; root++) {
        float buf[13];
        for (int i = 0; i < 13; i++) buf[i] = r == root ? (float)(root * 10 + i) : -1.0f;
        comm_broadcast(&comm, buf, 13, DTYPE_FP32, root);
        for (int i = 0; i < 13; i++) ck_assert_float_eq(buf[i], (float)(root * 10 + i));
    }
}
END_TEST

START_TEST(test_reduce_to_every_root) {
    int N = comm.world, r = comm.rank;
    for (int root = 0; root < N; root++) {
        float send[11], recv[11], inplace[11];
        for (int i = 0; i < 11; i++) send[i] = inplace[i] = (float)(r + i);
        comm_reduce(&comm, send, r == root ? recv : NULL, 11, DTYPE_FP32, root, COMM_SUM);
        comm_reduce(&comm, inplace, r == root ? inplace : NULL, 11, DTYPE_FP32, root, COMM_AVG);
        if (r != root) continue;
        for (int i = 0; i < 11; i++) {
            ck_assert_float_eq(recv[i], (float)(N * (N - 1) / 2 + N * i));
            ck_assert_float_eq(inplace[i], (float)(N * (N - 1) / 2 + N * i) / N);
        }
    }
}
END_TEST

// bf16 elements: sums of small integers are exact, one inexact sum rounds to
// nearest even (1 + 3 * 2^-9 -> 1 + 2^-7, where truncating would give 1), and
// the bytes counted are two per element.
START_TEST(test_bf16_collectives) {
    int N = comm.world, r = comm.rank;
    size_t part = 13, n = part * N;
    bf16 *buf = malloc(n * sizeof(bf16)), *recv = malloc(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float(r == 0 ? 1.0f : r == 1 ? 3.0f / 512.0f : 0.0f);
    comm_all_reduce(&comm, buf, n, DTYPE_BF16, COMM_SUM);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(buf[i], N == 1 ? 0x3F80 : 0x3F81);
    for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float((float)(2 * r + (int)(i % 5)));
    comm_all_reduce(&comm, buf, n, DTYPE_BF16, COMM_AVG);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(bf16_to_float(buf[i]), (float)(N - 1 + (int)(i % 5)));
    for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float((float)(r + (int)i));
    comm_reduce_scatter(&comm, buf, recv, n, DTYPE_BF16, COMM_SUM);
    for (size_t i = 0; i < part; i++)
        ck_assert_float_eq(bf16_to_float(recv[i]), (float)(N * (N - 1) / 2 + N * (int)(r * part + i)));
    // integers up to 256 are exact in bf16
    for (size_t i = 0; i < part; i++) buf[i] = bf16_from_float((float)(r * 16 + (int)i));
    CommStats before = comm.stats;
    comm_all_gather(&comm, buf, recv, n, DTYPE_BF16);
    CommStats d = comm_stats_diff(&comm.stats, &before);
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) ck_assert_float_eq(bf16_to_float(recv[q * part + i]), (float)(q * 16 + (int)i));
    ck_assert_uint_eq(d.ops[COMM_ALL_GATHER].bytes_sent, (uint64_t)(N - 1) * n * 2 / N);
    for (int root = 0; root < N; root++) {
        for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float(r == root ? (float)(root + (int)i % 7) : -1.0f);
        comm_broadcast(&comm, buf, n, DTYPE_BF16, root);
        for (size_t i = 0; i < n; i++) ck_assert_float_eq(bf16_to_float(buf[i]), (float)(root + (int)i % 7));
        for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float((float)(r + 1));
        comm_reduce(&comm, buf, r == root ? recv : NULL, n, DTYPE_BF16, root, COMM_SUM);
        if (r == root)
            for (size_t i = 0; i < n; i++) ck_assert_float_eq(bf16_to_float(recv[i]), (float)(N * (N + 1) / 2));
    }
    free(buf);
    free(recv);
}
END_TEST

// bf16 sums round every partial sum, as the ranks' pairwise additions do: ranks
// 0, 1, 2 hold 1, 1 + 2^-7 and 2^-10 (any others 0). Added two at a time in any
// order, with a rounding after each addition, they give 2 (0x4000); summed in
// fp32 and rounded once they give 2 + 2^-6 (0x4001). So a reduction that widened
// bf16 to fp32 on the wire fails here, and its bytes (counted from the datatype
// MPI is given) would be four per element, not two.
START_TEST(test_bf16_sums_round_each_partial_sum) {
    int N = comm.world, r = comm.rank;
    if (N < 3) return;
    size_t part = 5, n = part * N;
    bf16 *buf = malloc(n * sizeof(bf16)), *recv = malloc(n * sizeof(bf16));
    float mine = r == 0 ? 1.0f : r == 1 ? 1.0f + 1.0f / 128 : r == 2 ? 1.0f / 1024 : 0.0f;
    for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float(mine);
    CommStats before = comm.stats;
    comm_all_reduce(&comm, buf, n, DTYPE_BF16, COMM_SUM);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(buf[i], 0x4000);
    for (size_t i = 0; i < n; i++) buf[i] = bf16_from_float(mine);
    comm_reduce_scatter(&comm, buf, recv, n, DTYPE_BF16, COMM_SUM);
    for (size_t i = 0; i < part; i++) ck_assert_uint_eq(recv[i], 0x4000);
    comm_reduce(&comm, buf, r == 0 ? recv : NULL, n, DTYPE_BF16, 0, COMM_SUM);
    for (size_t i = 0; r == 0 && i < n; i++) ck_assert_uint_eq(recv[i], 0x4000);
    CommStats d = comm_stats_diff(&comm.stats, &before);
    uint64_t S = n * 2;  // two bytes per element
    ck_assert_uint_eq(d.ops[COMM_ALL_REDUCE].bytes_sent, 2 * (uint64_t)(N - 1) * S / N);
    ck_assert_uint_eq(d.ops[COMM_REDUCE_SCATTER].bytes_sent, (uint64_t)(N - 1) * S / N);
    ck_assert_uint_eq(d.ops[COMM_REDUCE].bytes_sent, r == 0 ? 0 : S);
    free(buf);
    free(recv);
}
END_TEST

// comm_split: two interleaved groups (even and odd ranks) reduce among
// themselves; their traffic counts in the group, in the parent, and, for a group
// split as `across`, in the parent's `across`.
START_TEST(test_split_groups) {
    int N = comm.world, r = comm.rank;
    Comm group;
    CommStats before = comm.stats, across_before = comm.across;
    comm_split(&comm, r % 2, 2, (N - r % 2 + 1) / 2, 1, &group);
    int members = (N + 1 - r % 2) / 2;  // ranks of r's parity
    ck_assert_int_eq(group.world, members);
    ck_assert_int_eq(group.rank, r / 2);
    float buf[6];
    for (int i = 0; i < 6; i++) buf[i] = (float)(r + i);
    comm_all_reduce(&group, buf, 6, DTYPE_FP32, COMM_SUM);
    float want = 0;  // the sum of the ranks of r's parity
    for (int q = r % 2; q < N; q += 2) want += (float)q;
    for (int i = 0; i < 6; i++) ck_assert_float_eq(buf[i], want + (float)(members * i));
    float mean[6];  // a group's average divides by the group's ranks, not the world's
    for (int i = 0; i < 6; i++) mean[i] = (float)(r + i);
    comm_all_reduce(&group, mean, 6, DTYPE_FP32, COMM_AVG);
    for (int i = 0; i < 6; i++) ck_assert_float_eq_tol(mean[i], (want + (float)(members * i)) / (float)members, 1e-5);
    uint64_t sent, recv;
    comm_ring_bytes(COMM_ALL_REDUCE, 6, DTYPE_FP32, group.rank, group.world, 0, &sent, &recv);  // each of the two
    CommStats parent = comm_stats_diff(&comm.stats, &before), across = comm_stats_diff(&comm.across, &across_before);
    ck_assert_uint_eq(group.stats.ops[COMM_ALL_REDUCE].bytes_sent, 2 * sent);
    ck_assert_uint_eq(parent.ops[COMM_ALL_REDUCE].bytes_sent, 2 * sent);
    ck_assert_uint_eq(across.ops[COMM_ALL_REDUCE].bytes_sent, 2 * sent);
    ck_assert_uint_eq(parent.ops[COMM_ALL_REDUCE].calls, 2);
    comm_free_group(&group);
    comm_barrier(&comm);  // the parent still works
}
END_TEST

START_TEST(test_non_blocking_overlaps_work) {
    int N = comm.world, r = comm.rank;
    size_t n = 1 << 16;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { a[i] = (float)r; b[i] = (float)(i % 7); }
    CommHandle ha = comm_all_reduce_start(&comm, a, n, DTYPE_FP32, COMM_SUM);
    CommHandle hb = comm_broadcast_start(&comm, b, n, DTYPE_FP32, N - 1);
    double work = 0;  // something to do while the collectives are in flight, nudging them along
    for (int i = 0; i < 100000; i++) {
        work += (double)i * 1e-9;
        if (i % 10000 == 0) {
            comm_progress(&comm, &ha);
            comm_progress(&comm, &hb);
        }
    }
    ck_assert_int_eq(comm_wait(&comm, &hb), 1);  // it was in flight
    ck_assert_int_eq(comm_wait(&comm, &ha), 1);
    ck_assert(work > 0);
    ck_assert(!ha.active && !hb.active);
    size_t wrong = 0;  // one assertion for the buffers: each costs Check microseconds of bookkeeping
    for (size_t i = 0; i < n; i++) wrong += a[i] != (float)(N * (N - 1) / 2) || b[i] != (float)(i % 7);
    ck_assert_msg(wrong == 0, "%zu of %zu elements are not the sum or the broadcast value", wrong, n);
    ck_assert_int_eq(comm_wait(&comm, &ha), 0);  // waiting twice is harmless: nothing in flight
    free(a);
    free(b);
}
END_TEST

START_TEST(test_counters_follow_the_ring_formulas) {
    int N = comm.world, r = comm.rank;
    size_t n = 24 * 5;  // divisible by 1..4
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    comm_stats_reset(&comm);
    comm_all_reduce(&comm, a, n, DTYPE_FP32, COMM_SUM);
    comm_reduce_scatter(&comm, a, b, n, DTYPE_FP32, COMM_SUM);
    comm_all_gather(&comm, b, a, n, DTYPE_FP32);
    comm_broadcast(&comm, a, n, DTYPE_FP32, 0);
    comm_broadcast(&comm, a, n, DTYPE_FP32, 0);
    comm_reduce(&comm, a, r == N - 1 ? b : NULL, n, DTYPE_FP32, N - 1, COMM_SUM);
    comm_all_to_all(&comm, a, b, n, DTYPE_BF16);  // half the floats' bytes, as bf16
    comm_gather(&comm, a, r == N - 1 ? b : NULL, n, DTYPE_FP32, N - 1);
    comm_barrier(&comm);
    uint64_t S = n * 4;
    const CommCounter *c = comm.stats.ops;
    ck_assert_uint_eq(c[COMM_ALL_REDUCE].calls, 1);
    ck_assert_uint_eq(c[COMM_ALL_REDUCE].elements, n);
    ck_assert_uint_eq(c[COMM_ALL_REDUCE].bytes_sent, 2 * (N - 1) * S / N);
    ck_assert_uint_eq(c[COMM_ALL_REDUCE].bytes_recv, 2 * (N - 1) * S / N);
    ck_assert_uint_eq(c[COMM_REDUCE_SCATTER].bytes_sent, (N - 1) * S / N);
    ck_assert_uint_eq(c[COMM_ALL_GATHER].bytes_recv, (N - 1) * S / N);
    ck_assert_uint_eq(c[COMM_BROADCAST].calls, 2);
    // chain 0 -> 1 -> ... -> N-1: the last rank only receives, the root only sends
    ck_assert_uint_eq(c[COMM_BROADCAST].bytes_sent, N == 1 || r == N - 1 ? 0 : 2 * S);
    ck_assert_uint_eq(c[COMM_BROADCAST].bytes_recv, r == 0 ? 0 : 2 * S);
    // chain 0 -> 1 -> ... -> N-1 (root): rank 0 only sends, the root only receives
    ck_assert_uint_eq(c[COMM_REDUCE].bytes_sent, r == N - 1 ? 0 : S);
    ck_assert_uint_eq(c[COMM_REDUCE].bytes_recv, N == 1 || r == 0 ? 0 : S);
    ck_assert_uint_eq(c[COMM_ALL_TO_ALL].calls, 1);
    ck_assert_uint_eq(c[COMM_ALL_TO_ALL].elements, n);
    ck_assert_uint_eq(c[COMM_ALL_TO_ALL].bytes_sent, (N - 1) * (S / 2) / N);
    ck_assert_uint_eq(c[COMM_ALL_TO_ALL].bytes_recv, (N - 1) * (S / 2) / N);
    ck_assert_uint_eq(c[COMM_BARRIER].calls, 1);
    // straight to the root: every other rank sends its part, the root receives N - 1 of them
    ck_assert_uint_eq(c[COMM_GATHER].calls, 1);
    ck_assert_uint_eq(c[COMM_GATHER].bytes_sent, r == N - 1 ? 0 : S / N);
    ck_assert_uint_eq(c[COMM_GATHER].bytes_recv, r == N - 1 ? (N - 1) * S / N : 0);
    ck_assert_uint_eq(c[COMM_BARRIER].bytes_sent, 0);
    free(a);
    free(b);
}
END_TEST

// Open MPI's shared-memory segments live in the job's session directory, which mpirun removes however the
// job ends, not in /dev/shm, where a rank that exits without MPI_Finalize would leave its own (comm/mpi.c).
START_TEST(test_shared_memory_segments_in_the_session_dir) {
    const char *session = getenv("OMPI_MCA_orte_jobfam_session_dir");
    if (!session) session = getenv("PMIX_SERVER_TMPDIR");
    // the transports mpirun was asked for (default: all); shared memory is Open MPI 4's vader, 5's sm
    const char *btl = getenv("OMPI_MCA_btl");
    int shared = !btl || ((strstr(btl, "vader") || strstr(btl, "sm")) && btl[0] != '^');
    if (!session || comm.local_size < 2 || !shared) return;  // no job, or no rank to share memory with
    const char *backing = getenv("OMPI_MCA_btl_vader_backing_directory");
    ck_assert_ptr_nonnull(backing);
    ck_assert_str_eq(backing, session);
    DIR *dir = opendir(session);
    ck_assert_ptr_nonnull(dir);
    int segments = 0;
    for (struct dirent *e; (e = readdir(dir));)
        segments += strncmp(e->d_name, "vader_segment.", 14) == 0 || strncmp(e->d_name, "sm_segment.", 11) == 0;
    closedir(dir);
    ck_assert_int_eq(segments, comm.local_size);
}
END_TEST

START_TEST(test_engine_mode_follows_the_environment) {
    const char *mode = getenv("SHARDLAB_COMM_ENGINE");
    ck_assert_int_eq(comm.engine_thread, !(mode && strcmp(mode, "inline") == 0));
}
END_TEST

// The engine's thread carries a collective to completion while the rank
// computes without a single MPI call: comm_test (no MPI call in this mode)
// reports it complete before comm_wait is ever called.
START_TEST(test_engine_completes_in_the_background) {
    if (!comm.engine_thread) return;  // inline: collectives advance only inside MPI calls
    int N = comm.world, r = comm.rank;
    size_t n = 1 << 20;  // 4 MiB: several rounds of a ring
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(r + (int)(i % 5));
    CommHandle h = comm_all_reduce_start(&comm, buf, n, DTYPE_FP32, COMM_SUM);
    double deadline = timer_now() + 50, acc = 0;
    while (!comm_test(&comm, &h) && timer_now() < deadline) acc += work(100000);
    ck_assert_msg(comm_test(&comm, &h), "rank %d: the all-reduce did not complete in the background", r);
    ck_assert(acc >= 0);
    ck_assert(h.active);  // complete, yet the handle waits for comm_wait
    comm_wait(&comm, &h);
    ck_assert(!h.active);
    size_t wrong = 0;  // one assertion for the buffer: each costs Check microseconds of bookkeeping
    for (size_t i = 0; i < n; i++) wrong += buf[i] != (float)(N * (N - 1) / 2 + N * (int)(i % 5));
    ck_assert_msg(wrong == 0, "rank %d: %zu of %zu elements are not the sum", r, wrong, n);
    free(buf);
}
END_TEST

// Many collectives in flight at once, of every kind: the engine runs them in the
// order they were started, so when the last is complete all the others are.
START_TEST(test_many_in_flight_complete_in_order) {
    enum { K = 48 };
    int N = comm.world, r = comm.rank;
    size_t part = 100;
    float *bufs[K], *recvs[K];
    CommHandle h[K];
    for (int k = 0; k < K; k++) {
        size_t n = part * N * (size_t)(1 + k % 3);
        bufs[k] = malloc(n * sizeof(float));
        recvs[k] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) bufs[k][i] = (float)(k + r * (int)(i % 3));
        switch (k % 4) {
        case 0: h[k] = comm_all_reduce_start(&comm, bufs[k], n, DTYPE_FP32, COMM_SUM); break;
        case 1: h[k] = comm_reduce_scatter_start(&comm, bufs[k], recvs[k], n, DTYPE_FP32, COMM_SUM); break;
        case 2: h[k] = comm_all_gather_start(&comm, bufs[k], recvs[k], n, DTYPE_FP32); break;
        default: h[k] = comm_broadcast_start(&comm, bufs[k], n, DTYPE_FP32, k % N); break;
        }
    }
    comm_wait(&comm, &h[K - 1]);
    if (comm.engine_thread)
        for (int k = 0; k < K - 1; k++) ck_assert_msg(comm_test(&comm, &h[k]), "collective %d of %d not complete", k, K);
    for (int k = K - 2; k >= 0; k--) comm_wait(&comm, &h[k]);  // in any order
    for (int k = 0; k < K; k++) {
        size_t n = part * N * (size_t)(1 + k % 3), p = n / N;
        for (size_t i = 0; i < (k % 4 == 1 ? p : n); i++) {
            size_t j = k % 4 == 1 ? r * p + i : i;  // the element of the whole buffer
            float sum = (float)(N * k) + (float)(N * (N - 1) / 2 * (int)(j % 3));
            float got = k % 4 == 1 ? recvs[k][i] : k % 4 == 2 ? recvs[k][i] : bufs[k][i];
            // all_gather: rank q's part of the whole is its own buffer's first p elements
            float gathered = (float)(k + (int)(j / p) * (int)((j % p) % 3));
            float want = k % 4 <= 1 ? sum : k % 4 == 2 ? gathered : (float)(k + (k % N) * (int)(i % 3));
            ck_assert_msg(got == want, "collective %d element %zu: %g, want %g", k, i, got, want);
        }
        free(bufs[k]);
        free(recvs[k]);
    }
}
END_TEST

// Values whose sum depends on the order of addition.
static void fill_random(float *x, size_t n, unsigned seed) {
    unsigned state = seed;
    for (size_t i = 0; i < n; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) / (float)(1 << 24) * 3.7f - 1.1f;
    }
}

// With MPI's own reductions (node_reductions 0) the engine's results are bitwise
// those of MPI's own non-blocking calls (the path before the engine).
START_TEST(test_results_bitwise_equal_to_mpi) {
    int N = comm.world, r = comm.rank, node_reductions = comm.node_reductions;
    comm.node_reductions = 0;
    size_t n = 3 * 4096 * (size_t)N;
    float *mine = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    fill_random(mine, n, 12345u + 7919u * (unsigned)r);
    MPI_Comm world;
    ck_assert_int_eq(MPI_Comm_dup(MPI_COMM_WORLD, &world), MPI_SUCCESS);
    MPI_Request req;
    // all-reduce: sum, average (MPI's sum times 1/N), blocking and non-blocking alike
    memcpy(ref, mine, n * sizeof(float));
    ck_assert_int_eq(MPI_Iallreduce(MPI_IN_PLACE, ref, (int)n, MPI_FLOAT, MPI_SUM, world, &req), MPI_SUCCESS);
    ck_assert_int_eq(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
    memcpy(got, mine, n * sizeof(float));
    CommHandle h = comm_all_reduce_start(&comm, got, n, DTYPE_FP32, COMM_SUM);
    comm_wait(&comm, &h);
    ck_assert(memcmp(got, ref, n * sizeof(float)) == 0);
    memcpy(got, mine, n * sizeof(float));
    comm_all_reduce(&comm, got, n, DTYPE_FP32, COMM_AVG);
    for (size_t i = 0; i < n; i++) ref[i] *= 1.0f / (float)N;
    ck_assert(memcmp(got, ref, n * sizeof(float)) == 0);
    // reduce-scatter
    size_t p = n / N;
    ck_assert_int_eq(MPI_Ireduce_scatter_block(mine, ref, (int)p, MPI_FLOAT, MPI_SUM, world, &req), MPI_SUCCESS);
    ck_assert_int_eq(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
    comm_reduce_scatter(&comm, mine, got, n, DTYPE_FP32, COMM_SUM);
    ck_assert(memcmp(got, ref, p * sizeof(float)) == 0);
    // reduce to the last rank
    ck_assert_int_eq(MPI_Ireduce(mine, ref, (int)n, MPI_FLOAT, MPI_SUM, N - 1, world, &req), MPI_SUCCESS);
    ck_assert_int_eq(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_SUCCESS);
    comm_reduce(&comm, mine, got, n, DTYPE_FP32, N - 1, COMM_SUM);
    if (r == N - 1) ck_assert(memcmp(got, ref, n * sizeof(float)) == 0);
    ck_assert_int_eq(MPI_Comm_free(&world), MPI_SUCCESS);
    free(mine);
    free(ref);
    free(got);
    comm.node_reductions = node_reductions;
}
END_TEST

// Through the node's shared memory (comm/node.c) a reduction is the sum in rank
// order 0, 1, ..., N-1, bit for bit: checked against every rank's input gathered
// and added here, in fp32 and in bf16 (each partial sum rounded), on a size of
// one chunk and on one of several chunks whose pieces do not divide evenly.
START_TEST(test_node_reductions_sum_in_rank_order) {
    int N = comm.world, r = comm.rank;
    if (N == 1 || !comm.engine_thread || !comm.node_reductions) return;  // inline, or SHARDLAB_COMM_REDUCE=mpi
    ck_assert_msg(comm_node_shared(&comm), "the ranks of this test share one node: the shared-memory path must be on");
    size_t sizes[2] = {3 * 4096 * (size_t)N, 700001 * (size_t)N};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k], p = n / N;
        float *mine = malloc(n * sizeof(float)), *all = malloc(n * N * sizeof(float)), *ref = malloc(n * sizeof(float)),
              *got = malloc(n * sizeof(float));
        bf16 *mine16 = malloc(n * sizeof(bf16)), *ref16 = malloc(n * sizeof(bf16)), *got16 = malloc(n * sizeof(bf16));
        fill_random(mine, n, 777u + 31u * (unsigned)r + (unsigned)k);
        ck_assert_int_eq(MPI_Allgather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD), MPI_SUCCESS);
        for (size_t i = 0; i < n; i++) {
            float acc = all[i];
            bf16 acc16 = bf16_from_float(all[i]);
            for (int q = 1; q < N; q++) {
                acc += all[(size_t)q * n + i];
                acc16 = bf16_add(acc16, bf16_from_float(all[(size_t)q * n + i]));
            }
            ref[i] = acc;
            ref16[i] = acc16;
            mine16[i] = bf16_from_float(mine[i]);
        }
        memcpy(got, mine, n * sizeof(float));
        comm_all_reduce(&comm, got, n, DTYPE_FP32, COMM_SUM);
        ck_assert(memcmp(got, ref, n * sizeof(float)) == 0);
        comm_reduce_scatter(&comm, mine, got, n, DTYPE_FP32, COMM_SUM);
        ck_assert(memcmp(got, ref + (size_t)r * p, p * sizeof(float)) == 0);
        comm_reduce(&comm, mine, r == N - 1 ? got : NULL, n, DTYPE_FP32, N - 1, COMM_SUM);
        if (r == N - 1) ck_assert(memcmp(got, ref, n * sizeof(float)) == 0);
        memcpy(got, mine, n * sizeof(float));
        comm_all_reduce(&comm, got, n, DTYPE_FP32, COMM_AVG);
        size_t wrong = 0;  // one assertion for the buffer: each costs Check microseconds of bookkeeping
        for (size_t i = 0; i < n; i++) wrong += got[i] != ref[i] * (1.0f / (float)N);
        ck_assert_msg(wrong == 0, "%zu of %zu averages are not the sum times 1/N", wrong, n);
        memcpy(got16, mine16, n * sizeof(bf16));
        comm_all_reduce(&comm, got16, n, DTYPE_BF16, COMM_SUM);
        ck_assert(memcmp(got16, ref16, n * sizeof(bf16)) == 0);
        comm_reduce_scatter(&comm, mine16, got16, n, DTYPE_BF16, COMM_SUM);
        ck_assert(memcmp(got16, ref16 + (size_t)r * p, p * sizeof(bf16)) == 0);
        free(mine), free(all), free(ref), free(got), free(mine16), free(ref16), free(got16);
    }
}
END_TEST

// What the node reductions really moved, counted beside the ring model: with
// equal pieces (one chunk, N dividing it) all-reduce and reduce-scatter move the
// ring's bytes; a reduce's root reads every other rank's sum as well. On several
// uneven chunks every byte one rank reads is one another rank's segment gave
// (the totals over ranks agree). MPI's own reductions count nothing here.
static CommCounter moved_by(CommOp op, size_t n, int root) {
    float *buf = calloc(n, sizeof(float)), *out = calloc(n, sizeof(float));
    CommStats before = comm.stats;
    if (op == COMM_ALL_REDUCE) comm_all_reduce(&comm, buf, n, DTYPE_FP32, COMM_SUM);
    if (op == COMM_REDUCE_SCATTER) comm_reduce_scatter(&comm, buf, out, n, DTYPE_FP32, COMM_SUM);
    if (op == COMM_REDUCE) comm_reduce(&comm, buf, out, n, DTYPE_FP32, root, COMM_SUM);
    free(buf), free(out);
    return comm_stats_diff(&comm.stats, &before).ops[op];
}

START_TEST(test_node_reductions_count_what_moved) {
    int N = comm.world, r = comm.rank, node_reductions = comm.node_reductions;
    if (N == 1 || !comm.engine_thread || !comm.node_reductions) return;
    uint64_t n = 16384 * (uint64_t)N, S = n * sizeof(float), part = S / (uint64_t)N;  // one chunk, 64 KiB or more
    CommCounter c = moved_by(COMM_ALL_REDUCE, n, 0);
    ck_assert_uint_eq(c.node_calls, 1);
    ck_assert_uint_eq(c.node_bytes_in, 2 * (N - 1) * part);
    ck_assert_uint_eq(c.node_bytes_out, 2 * (N - 1) * part);
    c = moved_by(COMM_REDUCE_SCATTER, n, 0);
    ck_assert_uint_eq(c.node_bytes_in, (N - 1) * part);
    ck_assert_uint_eq(c.node_bytes_out, (N - 1) * part);
    c = moved_by(COMM_REDUCE, n, 1 % N);
    ck_assert_uint_eq(c.node_bytes_in, (r == 1 % N ? 2 : 1) * (N - 1) * part);
    ck_assert_uint_eq(c.node_bytes_out, r == 1 % N ? (N - 1) * part : S);
    CommOp ops[3] = {COMM_ALL_REDUCE, COMM_REDUCE_SCATTER, COMM_REDUCE};
    for (int k = 0; k < 3; k++) {
        c = moved_by(ops[k], 2100007 * (size_t)N, N - 1);  // several chunks, pieces of unequal size
        unsigned long long mine[2] = {c.node_bytes_in, c.node_bytes_out}, total[2];
        ck_assert_int_eq(MPI_Allreduce(mine, total, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
        ck_assert_uint_eq(total[0], total[1]);
        ck_assert_uint_gt(total[0], 0);
    }
    comm.node_reductions = 0;
    c = moved_by(COMM_ALL_REDUCE, n, 0);
    ck_assert_uint_eq(c.node_calls + c.node_bytes_in + c.node_bytes_out, 0);
    ck_assert_uint_eq(c.calls, 1);
    comm.node_reductions = node_reductions;
}
END_TEST

// A record per collective waited for while recording, with its times in order.
START_TEST(test_records) {
    int N = comm.world;
    float buf[24 * 5] = {0};
    comm_all_reduce(&comm, buf, 8, DTYPE_FP32, COMM_SUM);  // not recording yet
    size_t count;
    ck_assert_ptr_null(comm_records(&comm, &count));
    ck_assert_uint_eq(count, 0);
    comm_record(&comm, 1);
    double before = timer_now();
    comm_all_reduce(&comm, buf, 8, DTYPE_FP32, COMM_SUM);
    CommHandle h = comm_broadcast_start(&comm, buf, 24 * 5, DTYPE_FP32, N - 1);
    double started = timer_now();
    while (!comm_test(&comm, &h)) work(1000);
    double seen = timer_now();
    comm_wait(&comm, &h);
    comm_all_gather(&comm, buf, buf + 24, 24, DTYPE_FP32);
    comm_barrier(&comm);
    comm_metric_max(&comm, 1.0);  // the uncounted helpers are not collectives of the engine
    double after = timer_now();
    const CommRecord *rec = comm_records(&comm, &count);
    ck_assert_uint_eq(count, 4);
    CommOp ops[4] = {COMM_ALL_REDUCE, COMM_BROADCAST, COMM_ALL_GATHER, COMM_BARRIER};
    size_t counts[4] = {8, 24 * 5, 24, 0};
    for (size_t i = 0; i < count; i++) {
        ck_assert_int_eq(rec[i].op, ops[i]);
        ck_assert_uint_eq(rec[i].count, counts[i]);
        ck_assert(before <= rec[i].issued && rec[i].issued <= rec[i].done && rec[i].done <= after);
        ck_assert(rec[i].issued <= rec[i].waited && rec[i].waited <= after);
        if (i > 0) ck_assert(rec[i - 1].done <= rec[i].done);
    }
    // started, completed while the rank worked, then waited for
    ck_assert(rec[1].issued < started && rec[1].done <= seen && rec[1].waited > seen);
    comm_clear_records(&comm);
    ck_assert_ptr_nonnull(comm_records(&comm, &count));
    ck_assert_uint_eq(count, 0);
    comm_record(&comm, 0);
    comm_all_reduce(&comm, buf, 8, DTYPE_FP32, COMM_SUM);
    ck_assert_ptr_null(comm_records(&comm, &count));
    ck_assert_uint_eq(count, 0);
}
END_TEST

static int count_lines_with(const char *path, const char *text) {
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, text)) n++;
    fclose(f);
    return n;
}

// The collectives waited for inside a span land on the trace, on a lane of their
// own; those waited for outside spans or while the trace is off do not.
START_TEST(test_trace_collective_lane) {
    int N = comm.world;
    float buf[4 * 12] = {0};
    Trace trace;
    trace_init(&trace, 1);
    trace_attach_comm(&trace, &comm);
    trace.step = 3;
    double t0 = trace_begin(&trace);
    comm_all_reduce(&comm, buf, 7, DTYPE_FP32, COMM_SUM);
    CommHandle h = comm_all_gather_start(&comm, buf, buf + 12, 4 * (size_t)N, DTYPE_FP32);
    trace_end(&trace, t0, "compute", "forward u0");
    comm_broadcast(&comm, buf, 5, DTYPE_FP32, 0);  // outside any span
    t0 = trace_begin(&trace);
    comm_wait(&comm, &h);  // started in the span before, waited for in this one
    trace_end(&trace, t0, "comm", "gather u1");
    trace.enabled = 0;
    comm_broadcast(&comm, buf, 6, DTYPE_FP32, 0);  // the trace is off
    trace.enabled = 1;
    t0 = trace_begin(&trace);
    trace_end(&trace, t0, "optim", "optimizer");
    ck_assert_uint_eq(trace.count, 5);
    const char *names[5] = {"forward u0", "all_reduce 7", "gather u1", "all_gather 8", "optimizer"};
    if (N != 2) names[3] = N == 1 ? "all_gather 4" : N == 3 ? "all_gather 12" : "all_gather 16";
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(trace.events[i].name, names[i]);
        ck_assert_int_eq(trace.events[i].step, 3);
        ck_assert(trace.events[i].start <= trace.events[i].end);
        ck_assert_int_eq(strcmp(trace.events[i].category, "collective") == 0, i == 1 || i == 3);
    }
    // the all-gather, started in the first span, begins before the second
    ck_assert(trace.events[3].start < trace.events[2].start);

    char dir[] = "/tmp/shardlab_trace_XXXXXX", prefix[64], path[96];
    if (comm.rank == 0) ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(prefix, sizeof prefix, "%s/t", dir);
    trace_write(&trace, &comm, prefix, NULL);
    if (comm.rank == 0) {
        snprintf(path, sizeof path, "%s.tsv", prefix);
        ck_assert_int_eq(count_lines_with(path, "\t3\tcollective\tall_reduce 7\t"), N);
        ck_assert_int_eq(count_lines_with(path, "\tcollective\t"), 2 * N);
        ck_assert_int_eq(count_lines_with(path, "broadcast"), 0);
        unlink(path);
        snprintf(path, sizeof path, "%s.json", prefix);
        ck_assert_int_eq(count_lines_with(path, "\"name\": \"all_reduce 7\", \"cat\": \"collective\""), N);
        ck_assert_int_eq(count_lines_with(path, "\"cat\": \"comm\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0,"), 1);
        ck_assert_int_eq(count_lines_with(path, "\"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {\"name\": \"steps\"}"), 1);
        ck_assert_int_eq(count_lines_with(path, "\"tid\": 1, \"args\": {\"name\": \"collectives\"}"), N);
        unlink(path);
        rmdir(dir);
    }
    trace_free(&trace);
    ck_assert_ptr_null(comm.log);  // detached: recording is off again
}
END_TEST

// Collectives that overlap in time go on separate Chrome trace threads, the
// first free one each time; the spans stay on thread 0.
START_TEST(test_trace_overlapping_collectives_get_threads) {
    Trace trace;
    trace_init(&trace, 1);
    // (start, end) in seconds: c0 and c1 overlap, c2 starts after c0 ended, c3 inside c1
    const double spans[4][2] = {{0.000, 0.010}, {0.005, 0.020}, {0.012, 0.030}, {0.014, 0.016}};
    const int want[4] = {1, 2, 1, 3};
    for (int i = 0; i < 4; i++) {
        double t0 = trace_begin(&trace);
        trace_end(&trace, t0, "collective", "c%d", i);
        trace.events[i].start = spans[i][0];
        trace.events[i].end = spans[i][1];
    }
    double t0 = trace_begin(&trace);
    trace_end(&trace, t0, "compute", "forward u0");
    char dir[] = "/tmp/shardlab_trace_XXXXXX", prefix[64], path[96], line[160];
    if (comm.rank == 0) ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(prefix, sizeof prefix, "%s/t", dir);
    trace_write(&trace, &comm, prefix, NULL);
    if (comm.rank == 0) {
        snprintf(path, sizeof path, "%s.json", prefix);
        for (int i = 0; i < 4; i++) {
            snprintf(line, sizeof line, "\"name\": \"c%d\", \"cat\": \"collective\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d,",
                     i, want[i]);
            ck_assert_msg(count_lines_with(path, line) == 1, "c%d is not on thread %d", i, want[i]);
        }
        ck_assert_int_eq(count_lines_with(path, "\"name\": \"forward u0\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0,"), 1);
        ck_assert_int_eq(count_lines_with(path, "\"pid\": 0, \"tid\": 3, \"args\": {\"name\": \"collectives 3\"}"), 1);
        ck_assert_int_eq(count_lines_with(path, "\"tid\": 4"), 0);
        unlink(path);
        snprintf(path, sizeof path, "%s.tsv", prefix);
        unlink(path);
        rmdir(dir);
    }
    trace_free(&trace);
}
END_TEST

int main(int argc, char **argv) {
    comm_init(&comm, &argc, &argv);
    comm.debug_checks = 1;
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("collectives");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_all_reduce_sum_and_average);
    tcase_add_test(tc, test_reduce_scatter);
    tcase_add_test(tc, test_all_gather);
    tcase_add_test(tc, test_all_to_all);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_broadcast_from_every_root);
    tcase_add_test(tc, test_reduce_to_every_root);
    tcase_add_test(tc, test_bf16_collectives);
    tcase_add_test(tc, test_bf16_sums_round_each_partial_sum);
    tcase_add_test(tc, test_split_groups);
    tcase_add_test(tc, test_non_blocking_overlaps_work);
    tcase_add_test(tc, test_counters_follow_the_ring_formulas);
    tcase_add_test(tc, test_shared_memory_segments_in_the_session_dir);
    tcase_add_test(tc, test_engine_mode_follows_the_environment);
    tcase_add_test(tc, test_engine_completes_in_the_background);
    tcase_add_test(tc, test_many_in_flight_complete_in_order);
    tcase_add_test(tc, test_results_bitwise_equal_to_mpi);
    tcase_add_test(tc, test_node_reductions_sum_in_rank_order);
    tcase_add_test(tc, test_node_reductions_count_what_moved);
    tcase_add_test(tc, test_records);
    tcase_add_test(tc, test_trace_collective_lane);
    tcase_add_test(tc, test_trace_overlapping_collectives_get_threads);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);  // MPI ranks must not fork
    srunner_run_all(sr, comm.rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    // every rank must agree that everything passed
    double any_failed = comm_metric_max(&comm, failed);
    comm_finalize(&comm);
    return any_failed > 0 ? 1 : 0;
}
