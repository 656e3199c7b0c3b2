// Which gathered tensors a unit frees after its pass (released_after), and how
// many units a prefetch reaches (units_ahead), against their rules written out
// over every unit of small layouts: a unit per block, and blocks grouped.
#include <check.h>

#include "kit/unit_buffers.h"
#include "tests/check_main.h"

static const GPT2Config SMALL = {.max_seq_len = 16, .vocab_size = 13, .padded_vocab_size = 16, .num_layers = 3,
                                 .num_heads = 2, .channels = 16};

// The forward (+1) frees what no later unit reads, but keeps everything of the last unit, whose backward
// comes next; the backward (-1) frees a tensor in its home unit; a forward-only pass (0) frees at once.
static void check_released(const GPT2Layout *l) {
    int U = l->num_units;
    for (int u = 0; u < U; u++)
        for (int i = 0; i < l->unit_num_tensors[u]; i++) {
            int t = l->unit_tensors[u][i];
            const GPT2Tensor *x = &l->tensors[t];
            ck_assert_msg(released_after(l, t, u, +1) == (x->last_unit == u && u != U - 1),
                          "unit %d of %d, %s (read last by unit %d): released after the forward %d", u, U, x->name,
                          x->last_unit, released_after(l, t, u, +1));
            ck_assert_msg(released_after(l, t, u, -1) == (x->home_unit == u),
                          "unit %d, %s (at home in unit %d): released after the backward %d", u, x->name,
                          x->home_unit, released_after(l, t, u, -1));
            ck_assert_int_eq(released_after(l, t, u, 0), 1);
        }
    int wte = gpt2_tensor_id(l, GPT2_WTE, 0);  // the tied embedding: read by unit 0 and the head
    ck_assert_int_eq(released_after(l, wte, 0, +1), 0);
    ck_assert_int_eq(released_after(l, wte, U - 1, +1), 0);
    ck_assert_int_eq(released_after(l, wte, 0, -1), 1);
}

static void check_ahead(const GPT2Layout *l) {
    int U = l->num_units;
    for (int u = 0; u < U; u++)
        for (int prefetch = 0; prefetch <= U + 2; prefetch++) {
            int forward = U - 1 - u < prefetch ? U - 1 - u : prefetch, backward = u < prefetch ? u : prefetch;
            ck_assert_int_eq(units_ahead(l, u, +1, prefetch), forward);
            ck_assert_int_eq(units_ahead(l, u, -1, prefetch), backward);
            ck_assert_int_eq(units_ahead(l, u, 0, prefetch), 0);
        }
}

START_TEST(test_a_unit_a_block) {
    GPT2Layout l;
    gpt2_layout_init(&l, SMALL);
    ck_assert_int_eq(l.num_units, 3 + 2);
    check_released(&l);
    check_ahead(&l);
    gpt2_layout_free(&l);
}
END_TEST

START_TEST(test_blocks_grouped) {
    for (int J = 2; J <= 3; J++) {
        GPT2Layout l;
        gpt2_layout_init(&l, SMALL);
        gpt2_layout_group_blocks(&l, J, 0);
        check_released(&l);
        check_ahead(&l);
        gpt2_layout_free(&l);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("unit_buffers");
    TCase *tc = tcase_create("release and prefetch");
    tcase_add_test(tc, test_a_unit_a_block);
    tcase_add_test(tc, test_blocks_grouped);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
