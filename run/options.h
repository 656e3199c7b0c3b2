// options.h: the command-line flags shared by all four trainers (a strategy's
// own flags come with it: StrategyPlugin in strategy.h). All ranks of a
// job must agree on every field (run/agree.c compares each one by name).
#ifndef SHARDLAB_OPTIONS_H
#define SHARDLAB_OPTIONS_H

#include <stdint.h>

#include "kit/strategy.h"
#include "util/cli.h"

// The most steps a run trains (--steps): step numbers fit checkpoint names (step_%08d) and an int.
#define STEPS_MAX (1 << 30)

typedef struct {
    const char *config_name;  // --config dN
    const char *model_path;   // --model FILE.bin (llm.c checkpoint)
    int vocab_size;           // --vocab V, with --config (default 50257)
    const char *data_dir;     // --data DIR with train.bin (and val.bin for eval)
    int batch;                // --batch B: global sequences per step
    int seq;                  // --seq T
    int steps;                // --steps S
    float lr;                 // --lr
    float weight_decay;       // --weight-decay
    uint64_t seed;            // --seed
    const char *log_path;     // --log FILE.jsonl
    int eval_every;           // --eval-every K (0: never)
    int eval_batches;         // --eval-batches K
    const char *out_model;    // --out-model FILE.bin: final model, llm.c format
    float ema;                // --ema DECAY: keep the moving average of the weights (0: off)
    float dropout;            // --dropout RATE: nanoGPT's dropout while training (0: off)
    int eval_ema;             // --eval-ema: validate the EMA weights too (val_loss_ema)
    const char *out_model_ema; // --out-model-ema FILE.bin: the final EMA weights, llm.c format
    int offload_optimizer;    // --offload-optimizer: master and AdamW moments in host memory, AdamW on the CPU
    const char *trace_prefix; // --trace PREFIX: PREFIX.json (Perfetto) and PREFIX.tsv
    int timeline_step;        // --timeline-step K: the step whose memory timeline is kept (0: the last trained)
    int quiet;                // --quiet: no progress lines
    int save_every;           // --save-every K: checkpoint every K steps (0: only on a stop signal)
    const char *ckpt_dir;     // --ckpt-dir DIR
    int save_full;            // --save-full: llm.c model.bin + optimizer.bin instead of shards
    int keep;                 // --keep K: complete checkpoints kept (default 2)
    const char *resume;       // --resume DIR: a checkpoint, or a --ckpt-dir
    int test_nan_at;          // --test-nan-at S: tests only, step S's loss NaN (run/test_hooks.h)
    float grad_clip;          // --grad-clip C: clip the global gradient norm to C (0: off)
    const char *lr_schedule;  // --lr-schedule constant|cosine
    int warmup;               // --warmup W: steps of linear warmup from 0
    float min_lr;             // --min-lr X: the cosine's last rate
    int recompute;            // --recompute: keep block inputs only, recompute in backward
    int fused_attention;      // --fused-attention (GPU builds): one pass over the keys, a log-sum-exp kept per row
    int fused_classifier;     // --fused-classifier: the loss's gradient written over the logits, no probabilities
    const char *data_order;   // --data-order sequential|llmc
    int grad_accum;           // --grad-accum K: micro-batches per step on each rank
    const char *accum_mode;   // --accum-mode sync-each|no-sync: when sharded gradients are reduced
    const char *precision;    // --precision fp32|bf16: the parameters the model reads and collectives move
    const char *reduce_dtype; // --reduce-dtype fp32|bf16: gradients (NULL: the precision)
} TrainOptions;

// The element types a run's options ask for (docs/precision.md).
void options_dtypes(const TrainOptions *opts, DType *param_dtype, DType *grad_dtype);

typedef enum { OPTIONS_RUN, OPTIONS_HELP, OPTIONS_ERROR } OptionsResult;

// The most flags a trainer has: the shared ones and its strategy's.
#define OPTIONS_MAX_FLAGS 57

// A trainer's flags: the shared ones, writing into *opts (set to their defaults
// here), then its strategy's own. Fills flags[] and returns how many. The same
// table parses the command line, prints --help and is compared across ranks
// (run/agree.c), so no option can be left out of any of them.
int options_flags(TrainOptions *opts, const StrategyPlugin *plugin, CliOption *flags);

// Parses argv into the flags' destinations. Returns OPTIONS_RUN; or
// OPTIONS_HELP after printing the usage on stdout (the program then exits 0);
// or OPTIONS_ERROR after printing the problem (exit 1). Prints only when
// `speak` is set, so that every rank of an MPI job can parse, rank 0 alone
// reports, and all of them finalize MPI. The plugin names the trainer in the
// usage, and checks its own options. given[i] (num_flags) is set to 1 for each flag the command line gives.
OptionsResult options_parse(const TrainOptions *opts, const CliOption *flags, int num_flags,
                            const StrategyPlugin *plugin, int argc, char **argv, int speak, int *given);

#endif
