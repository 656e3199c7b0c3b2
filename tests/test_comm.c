// The communication layer under mpirun -np 1..4: every collective on
// integer-valued floats, checked exactly on every rank; non-blocking calls
// overlapped with work; counters against the ring formulas written out by hand.
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../common/comm.h"

static Comm comm;

START_TEST(test_all_reduce_sum_and_average) {
    int N = comm.world, r = comm.rank;
    size_t n = 1001;  // not a multiple of N
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(r + 1) + (float)i;
    comm_all_reduce(&comm, buf, n, COMM_SUM);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(buf[i], (float)(N * (N + 1) / 2) + (float)(N * i));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(2 * r) + (float)i;
    comm_all_reduce(&comm, buf, n, COMM_AVG);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(buf[i], (float)(N - 1) + (float)i);
    free(buf);
}
END_TEST

START_TEST(test_reduce_scatter) {
    int N = comm.world, r = comm.rank;
    size_t part = 37, n = part * N;
    float *send = malloc(n * sizeof(float)), *recv = malloc(part * sizeof(float));
    for (size_t j = 0; j < n; j++) send[j] = (float)(r * 1000) + (float)j;
    comm_reduce_scatter(&comm, send, recv, n, COMM_SUM);
    for (size_t i = 0; i < part; i++)
        ck_assert_float_eq(recv[i], (float)(1000 * N * (N - 1) / 2) + (float)(N * (r * part + i)));
    comm_reduce_scatter(&comm, send, recv, n, COMM_AVG);
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
    comm_all_gather(&comm, send, recv, part * N);
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < part; i++) ck_assert_float_eq(recv[q * part + i], (float)(q * 100) + (float)i);
    free(send);
    free(recv);
}
END_TEST

START_TEST(test_broadcast_from_every_root) {
    int N = comm.world, r = comm.rank;
    for (int root = 0; root < N; root++) {
        float buf[13];
        for (int i = 0; i < 13; i++) buf[i] = r == root ? (float)(root * 10 + i) : -1.0f;
        comm_broadcast(&comm, buf, 13, root);
        for (int i = 0; i < 13; i++) ck_assert_float_eq(buf[i], (float)(root * 10 + i));
    }
}
END_TEST

START_TEST(test_reduce_to_every_root) {
    int N = comm.world, r = comm.rank;
    for (int root = 0; root < N; root++) {
        float send[11], recv[11], inplace[11];
        for (int i = 0; i < 11; i++) send[i] = inplace[i] = (float)(r + i);
        comm_reduce(&comm, send, r == root ? recv : NULL, 11, root, COMM_SUM);
        comm_reduce(&comm, inplace, r == root ? inplace : NULL, 11, root, COMM_AVG);
        if (r != root) continue;
        for (int i = 0; i < 11; i++) {
            ck_assert_float_eq(recv[i], (float)(N * (N - 1) / 2 + N * i));
            ck_assert_float_eq(inplace[i], (float)(N * (N - 1) / 2 + N * i) / N);
        }
    }
}
END_TEST

START_TEST(test_non_blocking_overlaps_work) {
    int N = comm.world, r = comm.rank;
    size_t n = 1 << 16;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { a[i] = (float)r; b[i] = (float)(i % 7); }
    CommHandle ha = comm_all_reduce_start(&comm, a, n, COMM_SUM);
    CommHandle hb = comm_broadcast_start(&comm, b, n, N - 1);
    double work = 0;  // something to do while the collectives are in flight, nudging them along
    for (int i = 0; i < 100000; i++) {
        work += (double)i * 1e-9;
        if (i % 10000 == 0) {
            comm_progress(&comm, &ha);
            comm_progress(&comm, &hb);
        }
    }
    comm_wait(&comm, &hb);
    comm_wait(&comm, &ha);
    ck_assert(work > 0);
    ck_assert(!ha.active && !hb.active);
    for (size_t i = 0; i < n; i++) {
        ck_assert_float_eq(a[i], (float)(N * (N - 1) / 2));
        ck_assert_float_eq(b[i], (float)(i % 7));
    }
    comm_wait(&comm, &ha);  // waiting twice is harmless
    free(a);
    free(b);
}
END_TEST

START_TEST(test_counters_follow_the_ring_formulas) {
    int N = comm.world, r = comm.rank;
    size_t n = 24 * 5;  // divisible by 1..4
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    comm_stats_reset(&comm);
    comm_all_reduce(&comm, a, n, COMM_SUM);
    comm_reduce_scatter(&comm, a, b, n, COMM_SUM);
    comm_all_gather(&comm, b, a, n);
    comm_broadcast(&comm, a, n, 0);
    comm_broadcast(&comm, a, n, 0);
    comm_reduce(&comm, a, r == N - 1 ? b : NULL, n, N - 1, COMM_SUM);
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
    ck_assert_uint_eq(c[COMM_BARRIER].calls, 1);
    ck_assert_uint_eq(c[COMM_BARRIER].bytes_sent, 0);
    free(a);
    free(b);
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
    tcase_add_test(tc, test_broadcast_from_every_root);
    tcase_add_test(tc, test_reduce_to_every_root);
    tcase_add_test(tc, test_non_blocking_overlaps_work);
    tcase_add_test(tc, test_counters_follow_the_ring_formulas);
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
