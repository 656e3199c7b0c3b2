#include "agree.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "device.h"
#include "errors.h"
#include "random.h"

// One thing all ranks must have the same of: `key` is what is compared, `shown`
// what the error message prints for it.
typedef struct {
    char name[48];
    uint64_t key;
    char shown[104];
} AgreeItem;

typedef enum { KIND_INT, KIND_FLOAT, KIND_U64, KIND_TEXT, KIND_SWITCH } OptionKind;

typedef struct {
    const char *flag;
    size_t offset;  // of the field in TrainOptions
    OptionKind kind;
} OptionField;

// The kind follows from the field's type, so a field of a type not handled here
// does not compile.
#define OPTION(flag, field)                                                                              \
    {flag, offsetof(TrainOptions, field),                                                                \
     _Generic(((TrainOptions *)0)->field, int: KIND_INT, float: KIND_FLOAT, uint64_t: KIND_U64,          \
              const char *: KIND_TEXT)}
// A flag without a value (the field is 0 or 1).
#define SWITCH(flag, field) {flag, offsetof(TrainOptions, field), KIND_SWITCH}

// Every field of TrainOptions. A new option must be added here: the size check
// below stops the build, and tests/test_agree.py (which makes the ranks differ in
// each flag that --help lists) fails, until it is.
static const OptionField OPTION_FIELDS[] = {
    OPTION("--config", config_name),
    OPTION("--model", model_path),
    OPTION("--vocab", vocab_size),
    OPTION("--data", data_dir),
    OPTION("--batch", batch),
    OPTION("--seq", seq),
    OPTION("--steps", steps),
    OPTION("--lr", lr),
    OPTION("--weight-decay", weight_decay),
    OPTION("--seed", seed),
    OPTION("--log", log_path),
    OPTION("--eval-every", eval_every),
    OPTION("--eval-batches", eval_batches),
    OPTION("--out-model", out_model),
    OPTION("--trace", trace_prefix),
    OPTION("--reshard-after-forward", reshard_after_forward),
    SWITCH("--quiet", quiet),
    OPTION("--save-every", save_every),
    OPTION("--ckpt-dir", ckpt_dir),
    SWITCH("--save-full", save_full),
    OPTION("--keep", keep),
    OPTION("--resume", resume),
    OPTION("--test-nan-at", test_nan_at),
    OPTION("--grad-clip", grad_clip),
    OPTION("--lr-schedule", lr_schedule),
    OPTION("--warmup", warmup),
    OPTION("--min-lr", min_lr),
    SWITCH("--recompute", recompute),
    OPTION("--data-order", data_order),
};
_Static_assert(sizeof(TrainOptions) == 176,
               "TrainOptions changed: add the new option to OPTION_FIELDS in agree.c, then update this size");

#define NUM_OPTION_FIELDS (int)(sizeof OPTION_FIELDS / sizeof OPTION_FIELDS[0])
// the trainer, the device and the options; then the digests of what was loaded
#define NUM_SETTINGS (NUM_OPTION_FIELDS + 2)
#define NUM_ITEMS (NUM_SETTINGS + 4)

// A 64-bit digest, 8 bytes at a time. Every rank feeds the same chunk sizes, so
// equal contents give equal digests.
static uint64_t digest_update(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t word;
        memcpy(&word, p, sizeof word);
        h = splitmix64(h ^ word);
    }
    for (; len > 0; p++, len--) h = splitmix64(h ^ *p);
    return h;
}

static void set_text(AgreeItem *item, const char *name, const char *text) {
    snprintf(item->name, sizeof item->name, "%s", name);
    item->key = text ? digest_update(1, text, strlen(text)) : 0;  // 0 only when not given
    if (text) snprintf(item->shown, sizeof item->shown, "'%.96s'", text);
    else snprintf(item->shown, sizeof item->shown, "(not given)");
}

static void describe_option(AgreeItem *item, const OptionField *field, const TrainOptions *opts) {
    const char *at = (const char *)opts + field->offset;
    int i;
    float f;
    uint64_t u;
    snprintf(item->name, sizeof item->name, "%s", field->flag);
    switch (field->kind) {
    case KIND_INT:
    case KIND_SWITCH:
        memcpy(&i, at, sizeof i);
        item->key = (uint64_t)(int64_t)i;
        if (field->kind == KIND_INT) snprintf(item->shown, sizeof item->shown, "%d", i);
        else snprintf(item->shown, sizeof item->shown, "%s", i ? "(given)" : "(not given)");
        break;
    case KIND_FLOAT:
        memcpy(&f, at, sizeof f);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        item->key = bits;
        snprintf(item->shown, sizeof item->shown, "%g", f);
        break;
    case KIND_U64:
        memcpy(&u, at, sizeof u);
        item->key = u;
        snprintf(item->shown, sizeof item->shown, "%llu", (unsigned long long)u);
        break;
    case KIND_TEXT: {
        const char *text;
        memcpy(&text, at, sizeof text);
        set_text(item, field->flag, text);
        break;
    }
    }
}

static void set_digest(AgreeItem *item, const char *name, uint64_t digest, const char *what) {
    snprintf(item->name, sizeof item->name, "%s", name);
    item->key = digest;
    snprintf(item->shown, sizeof item->shown, "%.72s (digest %016llx)", what, (unsigned long long)digest);
}

static uint64_t file_digest(const char *path, size_t *bytes) {
    FILE *f = xfopen(path, "rb");
    size_t chunk = 1 << 20, n;
    unsigned char *buf = xmalloc(chunk);
    uint64_t h = 1;
    *bytes = 0;
    while ((n = fread(buf, 1, chunk, f)) > 0) {
        h = digest_update(h, buf, n);
        *bytes += n;
    }
    if (ferror(f)) fatal("%s: read failed", path);
    fclose(f);
    free(buf);
    return h;
}

static void describe_tokens(AgreeItem *item, const char *name, const DataLoader *loader) {
    char what[64];
    snprintf(what, sizeof what, "%zu tokens", loader ? loader->num_tokens : 0);
    uint64_t h = loader ? digest_update(loader->num_tokens + 1, loader->tokens, loader->num_tokens * sizeof(uint16_t)) : 0;
    set_digest(item, name, h, what);
}

// This rank's list: the settings first, then digests of what it loaded.
static void describe_run(AgreeItem *items, const char *strategy, const TrainOptions *opts,
                         const DataLoader *train, const DataLoader *val) {
    memset(items, 0, NUM_ITEMS * sizeof *items);
    AgreeItem *item = items;
    set_text(item++, "the trainer", strategy);
    set_text(item++, "the device", device_name());
    for (int i = 0; i < NUM_OPTION_FIELDS; i++) describe_option(item++, &OPTION_FIELDS[i], opts);
    size_t bytes = 0;
    uint64_t h = opts->model_path ? file_digest(opts->model_path, &bytes) : 0;
    char what[4200];
    snprintf(what, sizeof what, "%zu bytes", bytes);
    set_digest(item++, "the contents of --model", h, what);
    describe_tokens(item++, "the contents of --data's train.bin", train);
    describe_tokens(item++, "the contents of --data's val.bin", val);
    h = 0;
    what[0] = '\0';
    if (opts->resume) {
        char dir[4096], manifest[4200];
        checkpoint_resolve(opts->resume, dir, sizeof dir);
        xsnprintf(manifest, sizeof manifest, "%s/manifest.txt", dir);
        h = file_digest(manifest, &bytes);
        const char *base = strrchr(dir, '/');
        snprintf(what, sizeof what, "%s", base ? base + 1 : dir);
    }
    set_digest(item++, "the checkpoint --resume names", h, what);
    CHECK(item - items == NUM_ITEMS, "agree.c: %d items described, NUM_ITEMS is %d", (int)(item - items), NUM_ITEMS);
}

// Rank 0: one line per item on which some rank differs from rank 0. The digests
// are compared only when the settings agree (another --model path already
// explains another model). Returns the number of such items.
static int report_differences(const AgreeItem *all, const size_t *counts, int world) {
    for (int r = 1; r < world; r++)
        if (counts[r] != counts[0]) {
            fprintf(stderr, "shardlab: ranks disagree on the build: rank %d runs a trainer that compares %zu "
                            "items, rank 0 one that compares %zu\n", r, counts[r] / sizeof(AgreeItem),
                    counts[0] / sizeof(AgreeItem));
            return 1;
        }
    int differences = 0;
    for (int i = 0; i < NUM_ITEMS; i++) {
        if (i == NUM_SETTINGS && differences) break;
        const AgreeItem *mine = &all[i];
        int shown = 0, others = 0;
        for (int r = 1; r < world; r++) {
            const AgreeItem *theirs = &all[(size_t)r * NUM_ITEMS + i];
            if (theirs->key == mine->key) continue;
            if (shown == 0) fprintf(stderr, "shardlab: ranks disagree on %s: rank 0 has %s", mine->name, mine->shown);
            if (shown == 3) {
                others++;
                continue;
            }
            fprintf(stderr, ", rank %d has %s", r, theirs->shown);
            shown++;
        }
        if (others) fprintf(stderr, " (and %d more rank%s)", others, others > 1 ? "s" : "");
        if (shown) {
            fprintf(stderr, "\n");
            differences++;
        }
    }
    return differences;
}

void agree_or_exit(Comm *comm, const char *strategy, const TrainOptions *opts, const DataLoader *train,
                   const DataLoader *val) {
    if (comm->world == 1) return;
    AgreeItem *items = xcalloc(NUM_ITEMS, sizeof *items);
    describe_run(items, strategy, opts, train, val);
    size_t *counts = NULL;
    AgreeItem *all = comm_metric_gather(comm, items, NUM_ITEMS * sizeof *items, &counts);
    int differences = comm->rank == 0 ? report_differences(all, counts, comm->world) : 0;
    free(items);
    free(all);
    free(counts);
    // rank 0 has printed before this collective, so the message is out before any rank exits
    if (comm_metric_max(comm, differences) > 0) {
        fflush(stdout);
        exit(1);
    }
}
