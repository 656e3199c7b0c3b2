#include "run/agree.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/checkpoint.h"
#include "device/device.h"
#include "models/gpt2_ops.h"
#include "util/errors.h"
#include "util/random.h"

// One thing all ranks must have the same of: `key` is what is compared, `shown`
// what the error message prints for it.
typedef struct {
    char name[48];
    uint64_t key;
    char shown[104];
} AgreeItem;

// the trainer and the device, each flag of the trainer's table, then the digests
// of what was loaded
#define NUM_DIGESTS 4

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

// One flag's value, read through the same table that parsed it; a flag the command line did not give shows
// as such, whatever its default (a --quantize-block left out is "(not given)", not "0").
static void describe_flag(AgreeItem *item, const CliOption *flag, int given) {
    snprintf(item->name, sizeof item->name, "%s", flag->flag);
    switch (flag->kind) {
    case CLI_INT:
    case CLI_SWITCH: {
        int i = *(const int *)flag->dest;
        item->key = (uint64_t)(int64_t)i;
        if (flag->kind == CLI_INT) snprintf(item->shown, sizeof item->shown, "%d", i);
        else snprintf(item->shown, sizeof item->shown, "%s", i ? "(given)" : "(not given)");
        break;
    }
    case CLI_FLOAT: {
        float f = *(const float *)flag->dest;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        item->key = bits;
        for (int digits = 6; digits <= 9; digits++) {  // the fewest digits that read back as f
            snprintf(item->shown, sizeof item->shown, "%.*g", digits, f);
            if (strtof(item->shown, NULL) == f) break;
        }
        break;
    }
    case CLI_UINT64: {
        uint64_t u = *(const uint64_t *)flag->dest;
        item->key = u;
        snprintf(item->shown, sizeof item->shown, "%llu", (unsigned long long)u);
        break;
    }
    case CLI_STRING:
        set_text(item, flag->flag, *(const char *const *)flag->dest);
        break;
    }
    if (!given) snprintf(item->shown, sizeof item->shown, "(not given)");
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
static void describe_run(AgreeItem *items, int num_items, const char *strategy, const CliOption *flags,
                         const int *given, int num_flags, const TrainOptions *opts, const DataLoader *train,
                         const DataLoader *val) {
    memset(items, 0, (size_t)num_items * sizeof *items);
    AgreeItem *item = items;
    set_text(item++, "the trainer", strategy);
    set_text(item++, "the device", device_name());
    char engine[200] = "cuBLAS";  // a GPU's; on a CPU the engine each rank chose (models/products.c)
    if (strcmp(device_name(), "cpu") == 0) {
        ProductEngine e = product_engine();
        snprintf(engine, sizeof engine, "%s %s, bf16 %s", e.engine, e.kernels, e.bf16_kernels);
    }
    set_text(item++, "the products' engine", engine);
    for (int i = 0; i < num_flags; i++) describe_flag(item++, &flags[i], given[i]);
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
    CHECK(item - items == num_items, "agree.c: %d items described, expected %d", (int)(item - items), num_items);
}

// Rank 0: one line per item on which some rank differs from rank 0. The digests
// are compared only when the settings agree (another --model path already
// explains another model). Returns the number of such items.
static int report_differences(const AgreeItem *all, int num_items, int num_settings, const size_t *counts,
                              int world) {
    // trainers with flags of their own describe more items: then the lists do not
    // line up, but each starts with the trainer
    size_t start = 0;
    for (int r = 1; r < world; r++) {
        start += counts[r - 1] / sizeof(AgreeItem);
        if (counts[r] == counts[0]) continue;
        if (all[start].key != all[0].key)
            fprintf(stderr, "shardlab: ranks disagree on %s: rank 0 has %s, rank %d has %s\n", all[0].name,
                    all[0].shown, r, all[start].shown);
        else
            fprintf(stderr, "shardlab: ranks disagree on the build: rank %d runs a trainer that compares %zu "
                            "items, rank 0 one that compares %zu\n", r, counts[r] / sizeof(AgreeItem),
                    counts[0] / sizeof(AgreeItem));
        return 1;
    }
    int differences = 0;
    for (int i = 0; i < num_items; i++) {
        if (i == num_settings && differences) break;
        const AgreeItem *mine = &all[i];
        int shown = 0, others = 0;
        for (int r = 1; r < world; r++) {
            const AgreeItem *theirs = &all[(size_t)r * num_items + i];
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

int ranks_agree(Comm *comm, const char *strategy, const CliOption *flags, const int *given, int num_flags,
                const TrainOptions *opts, const DataLoader *train, const DataLoader *val) {
    if (comm->world == 1) return 1;
    int num_settings = 3 + num_flags, num_items = num_settings + NUM_DIGESTS;
    AgreeItem *items = xcalloc((size_t)num_items, sizeof *items);
    describe_run(items, num_items, strategy, flags, given, num_flags, opts, train, val);
    size_t *counts = NULL;
    AgreeItem *all = comm_metric_gather(comm, items, (size_t)num_items * sizeof *items, &counts);
    int differences = comm->rank == 0 ? report_differences(all, num_items, num_settings, counts, comm->world) : 0;
    free(items);
    free(all);
    free(counts);
    // rank 0 has printed before this collective, so the message is out before any rank exits
    return comm_metric_max(comm, differences) == 0;
}
