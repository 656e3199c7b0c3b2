#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

static void usage(const char *program, const char *strategy) {
    fprintf(stderr,
            "usage: %s (--config d2|d4|d6|d12 [--vocab V] | --model FILE.bin) --data DIR [options]\n"
            "  trains GPT-2 with the %s strategy\n"
            "  --batch B          global sequences per step (default 4, divisible by ranks)\n"
            "  --seq T            sequence length (default 64)\n"
            "  --steps S          optimizer steps (default 20)\n"
            "  --lr LR            AdamW learning rate (default 3e-4)\n"
            "  --weight-decay WD  AdamW decoupled weight decay (default 0)\n"
            "  --seed N           initialization seed (default 1337)\n"
            "  --log FILE.jsonl   one JSON object per step, then a summary line\n"
            "  --eval-every K     validation loss every K steps on DIR/val.bin (default 0: never)\n"
            "  --eval-batches K   batches per validation (default 4)\n"
            "  --out-model FILE   write the final model as an llm.c checkpoint\n"
            "  --trace PREFIX     write a step timeline to PREFIX.json and PREFIX.tsv\n"
            "  --reshard-after-forward 0|1   FSDP only (default 1)\n"
            "  --ckpt-dir DIR     where checkpoints go (DIR/step_N, DIR/latest)\n"
            "  --save-every K     save every K steps (and on SIGINT/SIGTERM/SIGUSR1)\n"
            "  --save-full        save llm.c's model.bin + optimizer.bin (gathered) instead of shards\n"
            "  --keep K           complete checkpoints to keep (default 2)\n"
            "  --resume PATH      continue from a checkpoint (or a --ckpt-dir's latest), any strategy and N\n"
            "  --test-nan-at S    for tests: treat step S's loss as NaN\n"
            "  --quiet            no progress lines\n",
            program, strategy);
}

static long parse_long(const char *flag, const char *text, long min, long max) {
    errno = 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        fatal("%s: '%s' is not an integer in [%ld, %ld]", flag, text, min, max);
    return v;
}

static float parse_float(const char *flag, const char *text, float min) {
    errno = 0;
    char *end;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !(v >= min)) fatal("%s: '%s' is not a number >= %g", flag, text, min);
    return v;
}

void options_parse(TrainOptions *o, int argc, char **argv, const char *strategy) {
    memset(o, 0, sizeof *o);
    o->batch = 4;
    o->seq = 64;
    o->steps = 20;
    o->lr = 3e-4f;
    o->seed = 1337;
    o->eval_batches = 4;
    o->reshard_after_forward = 1;
    o->keep = 2;
    int reshard_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) { usage(argv[0], strategy); exit(0); }
        if (strcmp(flag, "--quiet") == 0) { o->quiet = 1; continue; }
        if (strcmp(flag, "--save-full") == 0) { o->save_full = 1; continue; }
        if (strncmp(flag, "--", 2) != 0) { usage(argv[0], strategy); fatal("unexpected argument '%s'", flag); }
        if (i + 1 >= argc) { usage(argv[0], strategy); fatal("%s needs a value", flag); }
        const char *value = argv[++i];
        if (strcmp(flag, "--config") == 0) o->config_name = value;
        else if (strcmp(flag, "--model") == 0) o->model_path = value;
        else if (strcmp(flag, "--vocab") == 0) o->vocab_size = (int)parse_long(flag, value, 1, 65536);
        else if (strcmp(flag, "--data") == 0) o->data_dir = value;
        else if (strcmp(flag, "--batch") == 0) o->batch = (int)parse_long(flag, value, 1, 1 << 20);
        else if (strcmp(flag, "--seq") == 0) o->seq = (int)parse_long(flag, value, 1, 1 << 20);
        else if (strcmp(flag, "--steps") == 0) o->steps = (int)parse_long(flag, value, 0, 1 << 30);
        else if (strcmp(flag, "--lr") == 0) o->lr = parse_float(flag, value, 0.0f);
        else if (strcmp(flag, "--weight-decay") == 0) o->weight_decay = parse_float(flag, value, 0.0f);
        else if (strcmp(flag, "--seed") == 0) o->seed = (uint64_t)parse_long(flag, value, 0, 1L << 62);
        else if (strcmp(flag, "--log") == 0) o->log_path = value;
        else if (strcmp(flag, "--eval-every") == 0) o->eval_every = (int)parse_long(flag, value, 0, 1 << 30);
        else if (strcmp(flag, "--eval-batches") == 0) o->eval_batches = (int)parse_long(flag, value, 1, 1 << 20);
        else if (strcmp(flag, "--out-model") == 0) o->out_model = value;
        else if (strcmp(flag, "--trace") == 0) o->trace_prefix = value;
        else if (strcmp(flag, "--save-every") == 0) o->save_every = (int)parse_long(flag, value, 0, 1 << 30);
        else if (strcmp(flag, "--ckpt-dir") == 0) o->ckpt_dir = value;
        else if (strcmp(flag, "--keep") == 0) o->keep = (int)parse_long(flag, value, 1, 1 << 20);
        else if (strcmp(flag, "--resume") == 0) o->resume = value;
        else if (strcmp(flag, "--test-nan-at") == 0) o->test_nan_at = (int)parse_long(flag, value, 1, 1 << 30);
        else if (strcmp(flag, "--reshard-after-forward") == 0) {
            o->reshard_after_forward = (int)parse_long(flag, value, 0, 1);
            reshard_given = 1;
        } else {
            usage(argv[0], strategy);
            fatal("unknown flag '%s'", flag);
        }
    }
    if (!o->config_name == !o->model_path) fatal("give exactly one of --config dN and --model FILE.bin");
    if (o->model_path && o->vocab_size) fatal("--vocab goes with --config; a --model file has its own vocab");
    if (!o->data_dir) fatal("--data DIR is required (make one with build/prepare)");
    if ((o->save_every || o->save_full) && !o->ckpt_dir) fatal("--save-every and --save-full need --ckpt-dir DIR");
    if (reshard_given && strcmp(strategy, "fsdp") != 0)
        fatal("--reshard-after-forward applies to the fsdp trainer only");
}
