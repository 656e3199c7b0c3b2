// The step-time model (comm/sim_clock.c) on cases worked out by hand: the
// alpha-beta cost of each collective; fitting a link back from its own
// timings; and whole steps, each strategy's own code run dry on the virtual
// clock (plan/dry_run.h), where the timeline can be followed on paper.
#include <check.h>
#include <math.h>

#include "plan/dry_run.h"
#include "comm/sim_clock.h"
#include "ddp/ddp.h"
#include "fsdp/fsdp.h"
#include "zero3/zero3.h"
#include "tests/check_main.h"

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

// The simulated network: a collective is checked and counted as on MPI (the ring
// model's bytes), takes its alpha-beta time on the link once the link is free,
// and a wait moves compute to its end, counted as waited; a group made by
// comm_split uses the slow link exactly when its ranks span machines.
START_TEST(test_simulated_network) {
    Link slow = {2e-5, 1e8};
    Machine m = {.flops_per_s = 1e9, .ranks_per_node = 2, .within = LINK, .across = slow};
    SimClock clock;
    sim_clock_init(&clock, &m, 4);
    Comm comm;
    comm_init_simulated(&comm, 1, 4, &clock);
    float x[1000];
    CommHandle h = comm_all_reduce_start(&comm, x, 1000, DTYPE_FP32, COMM_AVG);
    double cost = collective_seconds(COMM_ALL_REDUCE, 4000, 4, slow);  // 4 ranks on 2 machines: across
    uint64_t sent, recv;
    comm_ring_bytes(COMM_ALL_REDUCE, 1000, DTYPE_FP32, 1, 4, 0, &sent, &recv);
    ck_assert_uint_eq(comm.stats.ops[COMM_ALL_REDUCE].bytes_sent, sent);
    ck_assert_int_eq(comm_test(&comm, &h), 0);
    sim_compute(&clock, 1e9 * cost / 4);  // a quarter of it hides under compute
    comm_wait(&comm, &h);
    ck_assert_double_eq_tol(clock.now, cost, 1e-15);
    ck_assert_double_eq_tol(comm.stats.ops[COMM_ALL_REDUCE].seconds, 0.75 * cost, 1e-15);
    ck_assert_double_eq_tol(clock.spent.exposed, 0.75 * cost, 1e-15);
    Comm pair, across;
    comm_split(&comm, 0, 1, 2, 0, &pair);    // ranks 0, 1: one machine
    comm_split(&comm, 1, 2, 2, 1, &across);  // ranks 1, 3: two machines
    ck_assert_int_eq(pair.rank, 1);
    ck_assert_int_eq(across.rank, 0);
    double before = clock.now;
    comm_all_gather(&pair, x, x, 1000, DTYPE_FP32);
    ck_assert_double_eq_tol(clock.now - before, collective_seconds(COMM_ALL_GATHER, 4000, 2, LINK), 1e-15);
    before = clock.now;
    comm_all_gather(&across, x, x, 1000, DTYPE_FP32);
    ck_assert_double_eq_tol(clock.now - before, collective_seconds(COMM_ALL_GATHER, 4000, 2, slow), 1e-15);
    ck_assert_uint_eq(comm.across.ops[COMM_ALL_GATHER].calls, 1);
    comm_free_group(&pair);
    comm_free_group(&across);
    comm_finalize(&comm);
}
END_TEST

static const GPT2Config TINY = {.max_seq_len = 16, .vocab_size = 64, .padded_vocab_size = 64, .num_layers = 1,
                                 .num_heads = 2, .channels = 32};

typedef enum { STEP_DDP, STEP_ZERO1, STEP_ZERO2, STEP_ZERO3, STEP_FSDP, STEP_NUM_STRATEGIES } StepStrategy;

// One step of the tiny model (2 rows of 16 tokens per rank) by `strategy`'s own
// code on rank 0 of `ranks`, on `machine`'s clock.
static StepTime step_time_of(StepStrategy strategy, int ranks, int prefetch, int shard_group, int offload,
                             float clip, const Machine *machine) {
    DdpOptions ddp = {.zero_stage = strategy == STEP_ZERO1 ? 1 : strategy == STEP_ZERO2 ? 2 : 0};
    Zero3Options zero3 = {.prefetch = prefetch};
    FsdpOptions fsdp = {.reshard_after_forward = 1, .prefetch = prefetch, .wire = {.shard_group = shard_group}};
    Strategy (*init[STEP_NUM_STRATEGIES])(const StrategyContext *) = {ddp_init, zero12_init, zero12_init, zero3_init,
                                                                       fsdp_init};
    const void *options[STEP_NUM_STRATEGIES] = {&ddp, &ddp, &ddp, &zero3, &fsdp};
    DrySetup setup = {.init = init[strategy], .options = options[strategy], .config = TINY, .rows = 2, .seq = 16,
                      .micro_batches = 1, .params = DTYPE_FP32, .grads = DTYPE_FP32, .world = ranks,
                      .machine = machine, .steps = 1, .offload_optimizer = offload, .grad_clip = clip};
    DryResult result;
    dry_run(&setup, &result);
    mem_timeline_free(&result.timeline);
    return result.time;
}

static StepTime step_time(StepStrategy strategy, int ranks, int prefetch, int shard_group, const Machine *machine) {
    return step_time_of(strategy, ranks, prefetch, shard_group, 0, 0, machine);
}

// Forward FLOPs of each unit for the tiny model, as the model counts them: a
// block 2 * 12 C^2 + 4 T C per token, the head 2 Vp C.
static double tiny_forward_flops(int unit, double tokens) {
    double C = 32, T = 16;
    return unit == 0 ? 0 : unit == 1 ? (24 * C * C + 4 * T * C) * tokens : 2 * 64 * C * tokens;
}

START_TEST(test_ddp_timeline_by_hand) {
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
    StepTime t = step_time(STEP_DDP, 4, 0, 0, &m);
    ck_assert_double_eq_tol(t.compute, 3 * (f1 + f2), 1e-15);
    ck_assert_double_eq_tol(t.comm, a0 + a1 + a2, 1e-15);
    ck_assert_double_eq_tol(t.step, e0, 1e-15);
    ck_assert_double_eq_tol(t.exposed, e0 - t2, 1e-15);
}
END_TEST

// A kind's own link (--calibrate's fit per collective) prices that kind alone:
// DDP's all-reduces at the slow link, FSDP's all-gathers and reduce-scatters
// untouched.
START_TEST(test_each_kind_its_own_link) {
    Link slow = {2e-5, 1e8};
    Machine plain = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK};
    Machine kinds = plain;
    kinds.within_op[COMM_ALL_REDUCE] = slow;
    double C = 32, head = 2 * C * 4, block = (12 * C * C + 13 * C) * 4, unit0 = (64 * C + 16 * C) * 4;
    double want = collective_seconds(COMM_ALL_REDUCE, head, 4, slow) + collective_seconds(COMM_ALL_REDUCE, block, 4, slow) +
                  collective_seconds(COMM_ALL_REDUCE, unit0, 4, slow);
    ck_assert_double_eq_tol(step_time(STEP_DDP, 4, 0, 0, &kinds).comm, want, 1e-15);
    StepTime fsdp = step_time(STEP_FSDP, 4, 0, 0, &plain), fsdp_kinds = step_time(STEP_FSDP, 4, 0, 0, &kinds);
    ck_assert_double_eq_tol(fsdp_kinds.comm, fsdp.comm, 1e-15);
    ck_assert_double_eq_tol(fsdp_kinds.step, fsdp.step, 1e-15);
}
END_TEST

START_TEST(test_invariants_of_every_strategy) {
    for (int k = 0; k < STEP_NUM_STRATEGIES; k++) {
        // no compute: every collective waits for the one before it on the link
        Machine idle = {.flops_per_s = INFINITY, .ranks_per_node = 8, .within = LINK, .across = LINK};
        StepTime t = step_time((StepStrategy)k, 4, 0, 0, &idle);
        ck_assert_double_eq_tol(t.step, t.comm, 1e-15);
        ck_assert(t.comm > 0);
        // a free link: compute alone
        Machine free_link = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = {0, INFINITY}, .across = {0, INFINITY}};
        t = step_time((StepStrategy)k, 4, 0, 0, &free_link);
        ck_assert_double_eq_tol(t.step, t.compute, 1e-15);
        ck_assert_double_eq(t.exposed, 0);
        // ZeRO-3 and FSDP without prefetch wait for each collective at once: nothing overlaps
        Machine m = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK};
        t = step_time((StepStrategy)k, 4, 0, 0, &m);
        if (k == STEP_ZERO3 || k == STEP_FSDP) ck_assert_double_eq_tol(t.step, t.compute + t.comm, 1e-12);
        // prefetch hides some of it, and moves the same bytes
        StepTime prefetched = step_time((StepStrategy)k, 4, 1, 0, &m);
        ck_assert_double_eq_tol(prefetched.comm, t.comm, 1e-15);
        if (k == STEP_ZERO3 || k == STEP_FSDP) ck_assert(prefetched.step < t.step);
    }
}
END_TEST

START_TEST(test_machines_and_groups) {
    Link slow = {2e-5, 1e8};
    // 8 ranks on one machine: the fast link; on two: the slow one, for every ring
    Machine one = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = slow};
    Machine two = one;
    two.ranks_per_node = 4;
    StepTime fast = step_time(STEP_FSDP, 8, 0, 0, &one), cross = step_time(STEP_FSDP, 8, 0, 0, &two);
    ck_assert(cross.comm > 5 * fast.comm);
    // hybrid, groups of 4 on each machine: the all-gathers and reduce-scatters stay on the fast link; only the
    // all-reduce of the slices crosses
    StepTime hybrid = step_time(STEP_FSDP, 8, 0, 4, &two);
    ck_assert(hybrid.comm < cross.comm);
    // ranks sharing a machine's cores: 4 ranks on 1 core compute 4 times as long, on 2 twice, on 4 or more alone
    StepTime own = step_time(STEP_DDP, 8, 0, 0, &one);
    for (int slots = 1; slots <= 8; slots *= 2) {
        two.compute_slots = slots;
        StepTime shared = step_time(STEP_DDP, 8, 0, 0, &two);
        ck_assert_double_eq_tol(shared.compute, own.compute * (slots < 4 ? 4.0 / slots : 1.0), 1e-15);
    }
}
END_TEST

// --offload-optimizer, with a host link and no CPU time (link), a CPU and an
// instant link (cpu). At the step (a --grad-clip run) nothing hides the pieces:
// the link carries every tensor's gradients down and parameters up (4 + 4 bytes
// per element in fp32, 2 latencies each), the CPU's AdamW moves 28 bytes per
// element; none without the flag.
START_TEST(test_offload_by_hand) {
    Machine link = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK, .host = {3e-6, 2e9},
                    .host_memory = 1e300};
    Machine cpu = link;
    cpu.host = (Link){0, 1e300};
    cpu.host_memory = 5e9;
    GPT2Layout layout;
    gpt2_layout_init(&layout, TINY);
    double P = (double)layout.num_params, tensors = layout.num_tensors;
    gpt2_layout_free(&layout);
    double link_s = 2 * tensors * 3e-6 + 8 * P / 2e9, cpu_s = 28 * P / 5e9;
    StepTime plain = step_time(STEP_DDP, 1, 0, 0, &link), off = step_time_of(STEP_DDP, 1, 0, 0, 1, 1, &link);
    ck_assert_double_eq(plain.offload, 0);
    ck_assert_double_eq_tol(off.offload, link_s, 1e-15);
    ck_assert_double_eq_tol(off.step, plain.step + link_s, 1e-15);
    ck_assert_double_eq_tol(off.compute, plain.compute, 1e-15);
    ck_assert_double_eq_tol(step_time_of(STEP_DDP, 1, 0, 0, 1, 1, &cpu).offload, cpu_s, 1e-15);
    // 4 ranks on a machine share its memory's rate: their AdamW takes 4 times as long
    Machine shared = cpu;
    shared.ranks_per_node = 4;
    ck_assert_double_eq_tol(step_time_of(STEP_DDP, 4, 0, 0, 1, 1, &shared).offload, 4 * cpu_s, 1e-15);
    // sharded, each rank updates a part: less than the whole, more than nothing
    for (int k = STEP_ZERO1; k < STEP_NUM_STRATEGIES; k++) {
        StepTime shard = step_time_of((StepStrategy)k, 4, 0, 0, 1, 1, &link);
        ck_assert(shard.offload > 0 && shard.offload < link_s);
    }
}
END_TEST

// Without a clip the updates begin as units' shares are final. FSDP, one rank,
// --prefetch 0: the head's (lnfw, lnfb: 2C elements) is final after its
// backward and its AdamW runs during the block's; the block's and unit 0's are
// final when the backward ends, and wait. DDP waits for every bucket at the end
// of the backward: nothing hides, as with a clip.
START_TEST(test_offload_overlaps_backward) {
    Machine cpu = {.flops_per_s = 1e9, .ranks_per_node = 8, .within = LINK, .across = LINK, .host = {0, 1e300},
                   .host_memory = 5e9};
    GPT2Layout layout;
    gpt2_layout_init(&layout, TINY);
    double P = (double)layout.num_params, head = 2 * 32;
    gpt2_layout_free(&layout);
    ck_assert(28 * head / 5e9 < 2 * tiny_forward_flops(1, 32) / 1e9);  // the head's AdamW fits in the block's backward
    StepTime early = step_time_of(STEP_FSDP, 1, 0, 0, 1, 0, &cpu), late = step_time_of(STEP_FSDP, 1, 0, 0, 1, 1, &cpu);
    ck_assert_double_eq_tol(late.offload, 28 * P / 5e9, 1e-15);
    ck_assert_double_eq_tol(early.offload, 28 * (P - head) / 5e9, 1e-15);
    ck_assert_double_eq_tol(step_time_of(STEP_DDP, 1, 0, 0, 1, 0, &cpu).offload, 28 * P / 5e9, 1e-15);
}
END_TEST

int main(void) {
    Suite *s = suite_create("step_time");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_collectives_by_hand);
    tcase_add_test(tc, test_fit_recovers_a_link);
    tcase_add_test(tc, test_simulated_network);
    tcase_add_test(tc, test_ddp_timeline_by_hand);
    tcase_add_test(tc, test_each_kind_its_own_link);
    tcase_add_test(tc, test_invariants_of_every_strategy);
    tcase_add_test(tc, test_machines_and_groups);
    tcase_add_test(tc, test_offload_by_hand);
    tcase_add_test(tc, test_offload_overlaps_backward);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
