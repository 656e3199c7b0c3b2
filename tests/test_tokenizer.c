// The GPT-2 tokenizer against reference ids from tiktoken, and the byte tokenizer.
// Run from the repository root (it reads models/gpt2_vocab and tests/data).
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "run/tokenizer.h"
#include "tests/check_main.h"

static Tokenizer gpt2;

static void setup(void) { tokenizer_init(&gpt2, "gpt2", "models/gpt2_vocab"); }
static void teardown(void) { tokenizer_free(&gpt2); }

START_TEST(test_reference_vectors) {
    FILE *f = fopen("tests/data/token_vectors.jsonl", "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gpt2.vocab_size, 50257);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int cases = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        JsonCursor cur = {line, line + len};
        char *key, *text;
        size_t key_len, text_len;
        ck_assert_int_eq(json_expect(&cur, '{'), 0);
        ck_assert_int_eq(json_read_string(&cur, &key, &key_len), 0);
        ck_assert_str_eq(key, "text");
        free(key);
        ck_assert_int_eq(json_expect(&cur, ':'), 0);
        ck_assert_int_eq(json_read_string(&cur, &text, &text_len), 0);
        ck_assert_int_eq(json_expect(&cur, ','), 0);
        ck_assert_int_eq(json_read_string(&cur, &key, &key_len), 0);
        free(key);
        ck_assert_int_eq(json_expect(&cur, ':'), 0);
        ck_assert_int_eq(json_expect(&cur, '['), 0);
        int *ids = NULL;
        size_t count = 0, capacity = 0;
        tokenizer_encode(&gpt2, text, text_len, &ids, &count, &capacity);
        size_t k = 0;
        while (json_peek(&cur) != ']') {
            long want;
            ck_assert_int_eq(json_read_int(&cur, &want), 0);
            ck_assert_msg(k < count && ids[k] == want, "case %d (\"%.40s\"): token %zu is %d, expected %ld",
                          cases, text, k, k < count ? ids[k] : -1, want);
            k++;
            if (json_peek(&cur) == ',') json_expect(&cur, ',');
        }
        ck_assert_msg(k == count, "case %d (\"%.40s\"): %zu tokens, expected %zu", cases, text, count, k);
        free(ids);
        free(text);
        cases++;
    }
    ck_assert_int_gt(cases, 40);
    free(line);
    fclose(f);
}
END_TEST

START_TEST(test_pretokenizer_pieces) {
    const char *text = "Hello  world's 42x\n\n";
    const char *want[] = {"Hello", " ", " world", "'s", " 42", "x", "\n\n"};
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t n = gpt2_pretokenize_next(text + at, len - at);
        ck_assert_uint_eq(n, strlen(want[i]));
        ck_assert_mem_eq(text + at, want[i], n);
        at += n;
    }
    ck_assert_uint_eq(at, len);
}
END_TEST

// Encoding chunk by chunk (as build/prepare does for large texts) gives the ids
// of encoding the whole text, whatever the chunk size.
START_TEST(test_chunked_encoding_equals_whole) {
    const char *text = "Hello  world's 42x\n\n  indented   spaces\tand tabs, caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac   end  ";
    size_t len = strlen(text);
    int *whole = NULL, *chunked = NULL;
    size_t n_whole = 0, cap_whole = 0;
    tokenizer_encode(&gpt2, text, len, &whole, &n_whole, &cap_whole);
    for (size_t chunk = 1; chunk < len; chunk += 3) {
        size_t n = 0, cap = 0;
        for (size_t at = 0; at < len;) {
            size_t end = tokenizer_chunk_end(&gpt2, text, len, at, chunk);
            ck_assert_uint_gt(end, at);
            tokenizer_encode(&gpt2, text + at, end - at, &chunked, &n, &cap);
            at = end;
        }
        ck_assert_uint_eq(n, n_whole);
        ck_assert_mem_eq(chunked, whole, n * sizeof(int));
        free(chunked);
        chunked = NULL;
    }
    free(whole);
}
END_TEST

START_TEST(test_byte_tokenizer) {
    Tokenizer byte;
    tokenizer_init(&byte, "byte", NULL);
    int *ids = NULL;
    size_t count = 0, capacity = 0;
    tokenizer_encode(&byte, "A\xff\n", 3, &ids, &count, &capacity);
    ck_assert_uint_eq(count, 3);
    ck_assert_int_eq(ids[0], 65);
    ck_assert_int_eq(ids[1], 255);
    ck_assert_int_eq(ids[2], 10);
    free(ids);
    tokenizer_free(&byte);
}
END_TEST

START_TEST(test_invalid_utf8_keeps_every_byte) {
    // a stray continuation byte is its own symbol, and BPE still finds an id for it
    int *ids = NULL;
    size_t count = 0, capacity = 0;
    tokenizer_encode(&gpt2, "a\x80z", 3, &ids, &count, &capacity);
    ck_assert_uint_ge(count, 2);
    free(ids);
}
END_TEST

START_TEST(test_missing_vocab_dir) {
    Tokenizer t;
    tokenizer_init(&t, "gpt2", "/nonexistent");
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("gpt2");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reference_vectors);
    tcase_add_test(tc, test_pretokenizer_pieces);
    tcase_add_test(tc, test_invalid_utf8_keeps_every_byte);
    tcase_add_test(tc, test_chunked_encoding_equals_whole);
    suite_add_tcase(s, tc);
    TCase *plain = tcase_create("byte and errors");
    tcase_add_test(plain, test_byte_tokenizer);
    tcase_add_exit_test(plain, test_missing_vocab_dir, 1);
    suite_add_tcase(s, plain);
    return run_suite(s);
}
