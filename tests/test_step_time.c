// The step-time model (common/step_time.c) on cases worked out by hand: the
// alpha-beta cost of each collective; fitting a link back from its own
// timings; and whole steps where the timeline can be followed on paper.
#include <check.h>
#include <math.h>

#include "../common/step_time.h"
#include "check_main.h"

static const Link LINK = {2e-6, 1e9};  // 2 us per message step, 1 GB/s

START_TEST(test_collectives_by_hand) {
    // all-reduce, 4 ranks, 4 MB: 2*3 steps of 2 us, and 2*3/4 of 4 MB at 1 GB/s
    ck_assert_double_eq_tol(collective_seconds(COMM_ALL_REDUCE, 4e6, 4, LINK), 12e-6 + 6e-3, 1e-15);
    ck_assert_double_eq_tol(collective_seconds(COMM_ALL_GATHER, 4e6, 4, LINK), 6e-6 + 3e-3, 1e-15);
    ck_assert_double_eq_tol(collective_seconds(COMM_REDUCE_SCATTER, 4e6, 2, LINK), 2e-6 + 2e-3, 1e-15);
    // a pipelined chain of 3: two hops of latency, the whole buffer's time once
    ck_assert_double_eq_tol(collective_seconds(COMM_BROADCAST, 1e6, 3, LINK), 4e-6 + 1e-3, 1e-15);
    ck_assert_double_eq_tol(collective_seconds(COMM_REDUCE, 1e6, 3, LINK), 4e-6 + 1e-3, 1e-15);
    ck_assert_double_eq(collective_seconds(COMM_ALL_REDUCE, 4e6, 1, LINK), 0);  // alone: nothing moves
}
END_TEST

START_TEST(test_fit_recovers_a_link) {
    CommOp op[12];
    int ranks[12];
    double bytes[12], seconds[12];
    for (int i = 0; i < 12; i++) {
        op[i] = i % 3 == 0 ? COMM_ALL_REDUCE : i % 3 == 1 ? COMM_ALL_GATHER : COMM_BROADCAST;
        ranks[i] = 2 + i % 3;
        bytes[i] = 1024.0 * (1 << i);
        seconds[i] = collective_seconds(op[i], bytes[i], ranks[i], LINK);
    }
    Link fit;
    ck_assert_int_eq(fit_link(op, ranks, bytes, seconds, 12, &fit), 0);
    ck_assert_double_eq_tol(fit.alpha, LINK.alpha, 1e-12);
    ck_assert_double_eq_tol(fit.beta, LINK.beta, 1e-3);
    // one size only cannot tell latency from bandwidth
    for (int i = 0; i < 12; i++) bytes[i] = 4096, ranks[i] = 2, op[i] = COMM_ALL_GATHER;
    ck_assert_int_eq(fit_link(op, ranks, bytes, seconds, 12, &fit), -1);
}
END_TEST

static GPT2Layout tiny_layout(void) {
    GPT2Config c = {.max_seq_len = 16, .vocab_size = 64, .padded_vocab_size = 64, .num_layers = 1, .num_heads = 2,
                    .channels = 32};
    GPT2Layout layout;
    gpt2_layout_init(&layout, c);
    return layout;
}

// Forward FLOPs of each unit for the tiny model, as the model counts them: a
// block 2 * 12 C^2 + 4 T C per token, the head 2 Vp C.
static double tiny_forward_flops(int unit, double tokens) {
    double C = 32, T = 16;
    return unit == 0 ? 0 : unit == 1 ? (24 * C * C + 4 * T * C) * tokens : 2 * 64 * C * tokens;
}

START_TEST(test_ddp_timeline_by_hand) {
    GPT2Layout layout = tiny_layout();
    StepSetup setup = {.ranks = 4, .rows = 2, .seq = 16, .prefetch = 0, .shard_group = 4, .bytes = 4};
    Machine m = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK};
    double tokens = 32, f1 = tiny_forward_flops(1, tokens) / 1e9, f2 = tiny_forward_flops(2, tokens) / 1e9;
    // the buckets: the head's (lnfw, lnfb), the block's 12 tensors, unit 0's (wte, wpe)
    double C = 32, head = 2 * C * 4, block = (12 * C * C + 13 * C) * 4, unit0 = (64 * C + 16 * C) * 4;
    double a2 = collective_seconds(COMM_ALL_REDUCE, head, 4, LINK), a1 = collective_seconds(COMM_ALL_REDUCE, block, 4, LINK);
    double a0 = collective_seconds(COMM_ALL_REDUCE, unit0, 4, LINK);
    // forward f1 + f2; the head's backward (2 f2) ends at t1 and its all-reduce starts; the block's backward
    // (2 f1) ends at t2, its all-reduce starts once the link is free; unit 0's backward takes no time
    double t1 = f1 + f2 + 2 * f2, t2 = t1 + 2 * f1;
    double e1 = fmax(t2, t1 + a2) + a1, e0 = fmax(t2, e1) + a0;
    StepTime t = step_time(&layout, STEP_DDP, &setup, &m);
    ck_assert_double_eq_tol(t.compute, 3 * (f1 + f2), 1e-15);
    ck_assert_double_eq_tol(t.comm, a0 + a1 + a2, 1e-15);
    ck_assert_double_eq_tol(t.step, e0, 1e-15);
    ck_assert_double_eq_tol(t.exposed, e0 - t2, 1e-15);
    gpt2_layout_free(&layout);
}
END_TEST

// A kind's own link (--calibrate's fit per collective) prices that kind alone:
// DDP's all-reduces at the slow link, FSDP's all-gathers and reduce-scatters
// untouched.
START_TEST(test_each_kind_its_own_link) {
    GPT2Layout layout = tiny_layout();
    StepSetup setup = {.ranks = 4, .rows = 2, .seq = 16, .prefetch = 0, .shard_group = 4, .bytes = 4};
    Link slow = {2e-5, 1e8};
    Machine plain = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK};
    Machine kinds = plain;
    kinds.within_op[COMM_ALL_REDUCE] = slow;
    double C = 32, head = 2 * C * 4, block = (12 * C * C + 13 * C) * 4, unit0 = (64 * C + 16 * C) * 4;
    double want = collective_seconds(COMM_ALL_REDUCE, head, 4, slow) + collective_seconds(COMM_ALL_REDUCE, block, 4, slow) +
                  collective_seconds(COMM_ALL_REDUCE, unit0, 4, slow);
    ck_assert_double_eq_tol(step_time(&layout, STEP_DDP, &setup, &kinds).comm, want, 1e-15);
    StepTime fsdp = step_time(&layout, STEP_FSDP, &setup, &plain), fsdp_kinds = step_time(&layout, STEP_FSDP, &setup, &kinds);
    ck_assert_double_eq_tol(fsdp_kinds.comm, fsdp.comm, 1e-15);
    ck_assert_double_eq_tol(fsdp_kinds.step, fsdp.step, 1e-15);
    gpt2_layout_free(&layout);
}
END_TEST

START_TEST(test_invariants_of_every_strategy) {
    GPT2Layout layout = tiny_layout();
    for (int k = 0; k < STEP_NUM_STRATEGIES; k++) {
        StepSetup setup = {.ranks = 4, .rows = 2, .seq = 16, .prefetch = 0, .shard_group = 4, .bytes = 4};
        // no compute: every collective waits for the one before it on the link
        Machine idle = {.flops_per_s = INFINITY, .ranks_per_node = 8, .within = LINK, .across = LINK};
        StepTime t = step_time(&layout, (StepStrategy)k, &setup, &idle);
        ck_assert_double_eq_tol(t.step, t.comm, 1e-15);
        ck_assert(t.comm > 0);
        // a free link: compute alone
        Machine free_link = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = {0, INFINITY}, .across = {0, INFINITY}};
        t = step_time(&layout, (StepStrategy)k, &setup, &free_link);
        ck_assert_double_eq_tol(t.step, t.compute, 1e-15);
        ck_assert_double_eq(t.exposed, 0);
        // ZeRO-3 and FSDP without prefetch wait for each collective at once: nothing overlaps
        Machine m = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK};
        t = step_time(&layout, (StepStrategy)k, &setup, &m);
        if (k == STEP_ZERO3 || k == STEP_FSDP) ck_assert_double_eq_tol(t.step, t.compute + t.comm, 1e-12);
        // prefetch hides some of it, and moves the same bytes
        setup.prefetch = 1;
        StepTime prefetched = step_time(&layout, (StepStrategy)k, &setup, &m);
        ck_assert_double_eq_tol(prefetched.comm, t.comm, 1e-15);
        if (k == STEP_ZERO3 || k == STEP_FSDP) ck_assert(prefetched.step < t.step);
    }
    gpt2_layout_free(&layout);
}
END_TEST

START_TEST(test_machines_and_groups) {
    GPT2Layout layout = tiny_layout();
    Link slow = {2e-5, 1e8};
    StepSetup setup = {.ranks = 8, .rows = 2, .seq = 16, .prefetch = 0, .shard_group = 8, .bytes = 4};
    // 8 ranks on one machine: the fast link; on two: the slow one, for every ring
    Machine one = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = slow};
    Machine two = one;
    two.ranks_per_node = 4;
    StepTime fast = step_time(&layout, STEP_FSDP, &setup, &one), cross = step_time(&layout, STEP_FSDP, &setup, &two);
    ck_assert(cross.comm > 5 * fast.comm);
    // hybrid, groups of 4 on each machine: the all-gathers and reduce-scatters stay on the fast link; only the
    // all-reduce of the slices crosses
    setup.shard_group = 4;
    StepTime hybrid = step_time(&layout, STEP_FSDP, &setup, &two);
    ck_assert(hybrid.comm < cross.comm);
    // ranks sharing a machine's cores: 4 ranks on 1 core compute 4 times as long, on 2 twice, on 4 or more alone
    StepTime own = step_time(&layout, STEP_DDP, &setup, &one);
    for (int slots = 1; slots <= 8; slots *= 2) {
        two.compute_slots = slots;
        StepTime shared = step_time(&layout, STEP_DDP, &setup, &two);
        ck_assert_double_eq_tol(shared.compute, own.compute * (slots < 4 ? 4.0 / slots : 1.0), 1e-15);
    }
    gpt2_layout_free(&layout);
}
END_TEST

int main(void) {
    Suite *s = suite_create("step_time");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_collectives_by_hand);
    tcase_add_test(tc, test_fit_recovers_a_link);
    tcase_add_test(tc, test_ddp_timeline_by_hand);
    tcase_add_test(tc, test_each_kind_its_own_link);
    tcase_add_test(tc, test_invariants_of_every_strategy);
    tcase_add_test(tc, test_machines_and_groups);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
