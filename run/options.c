#include "run/options.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "models/gpt2.h"
#include "util/cli.h"
#include "util/errors.h"

int options_flags(TrainOptions *o, const StrategyPlugin *plugin, CliOption *flags) {
    memset(o, 0, sizeof *o);
    o->batch = 4;
    o->seq = 64;
    o->steps = 20;
    o->lr = 3e-4f;
    o->seed = 1337;
    o->eval_batches = 4;
    o->keep = 2;
    o->lr_schedule = "constant";
    o->data_order = "sequential";
    o->grad_accum = 1;
    o->accum_mode = "sync-each";
    o->precision = "fp32";
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &o->config_name, 0, 0, "a preset model (d12 is GPT-2 124M)"},
        {"--vocab", "V", CLI_INT, &o->vocab_size, 1, 65536, "vocab of a --config model (default: --data's, as build/prepare recorded it; else 50257)"},
        {"--model", "FILE.bin", CLI_STRING, &o->model_path, 0, 0, "start from an llm.c checkpoint instead"},
        {"--data", "DIR", CLI_STRING, &o->data_dir, 0, 0, "DIR/train.bin (and DIR/val.bin), from build/prepare"},
        {"--batch", "B", CLI_INT, &o->batch, 1, 1 << 20, "global sequences per step (default 4, divisible by ranks)"},
        {"--seq", "T", CLI_INT, &o->seq, 1, 1 << 20, "sequence length (default 64)"},
        {"--steps", "S", CLI_INT, &o->steps, 0, STEPS_MAX, "optimizer steps (default 20)"},
        {"--lr", "LR", CLI_FLOAT, &o->lr, 0, FLT_MAX, "AdamW learning rate (default 3e-4)"},
        {"--weight-decay", "WD", CLI_FLOAT, &o->weight_decay, 0, FLT_MAX, "AdamW decoupled weight decay (default 0)"},
        {"--seed", "N", CLI_UINT64, &o->seed, 0, 4611686018427387904.0, "initialization seed (default 1337)"},
        {"--log", "FILE.jsonl", CLI_STRING, &o->log_path, 0, 0, "one JSON object per step, then a summary line"},
        {"--eval-every", "K", CLI_INT, &o->eval_every, 0, 1 << 30,
         "validation loss every K steps on DIR/val.bin (default 0: never)"},
        {"--eval-batches", "K", CLI_INT, &o->eval_batches, 1, 1 << 20, "batches per validation (default 4)"},
        {"--out-model", "FILE", CLI_STRING, &o->out_model, 0, 0, "write the final model as an llm.c checkpoint"},
        {"--dropout", "RATE", CLI_FLOAT, &o->dropout, 0, 0.99,
         "drop this share of the embeddings, attention probabilities and residual branches' outputs while "
         "training, the masks a function of --seed, the step and each token's place in the global batch "
         "(default 0: none)"},
        {"--ema", "DECAY", CLI_FLOAT, &o->ema, 0, 0.999999,
         "keep an exponential moving average of the weights, ema = DECAY ema + (1 - DECAY) w after each step, "
         "sharded as the weights are (default 0: none)"},
        {"--eval-ema", NULL, CLI_SWITCH, &o->eval_ema, 0, 0,
         "with --ema and --eval-every: validate the EMA weights too (val_loss_ema in the log)"},
        {"--out-model-ema", "FILE", CLI_STRING, &o->out_model_ema, 0, 0,
         "with --ema: write the final EMA weights as an llm.c checkpoint"},
        {"--offload-optimizer", NULL, CLI_SWITCH, &o->offload_optimizer, 0, 0,
         "keep the fp32 master and AdamW moments in host memory and run AdamW on the CPU: gradients go down, "
         "parameters come back (docs/offload.md)"},
        {"--trace", "PREFIX", CLI_STRING, &o->trace_prefix, 0, 0, "write a step timeline to PREFIX.json and PREFIX.tsv"},
        {"--timeline-step", "K", CLI_INT, &o->timeline_step, 1, 1 << 30,
         "keep step K's memory timeline (summary and --trace; default: the last step trained)"},
        {"--ckpt-dir", "DIR", CLI_STRING, &o->ckpt_dir, 0, 0, "where checkpoints go (DIR/step_N, DIR/latest)"},
        {"--save-every", "K", CLI_INT, &o->save_every, 0, 1 << 30, "save every K steps (and on SIGINT/SIGTERM/SIGUSR1)"},
        {"--save-full", NULL, CLI_SWITCH, &o->save_full, 0, 0,
         "save llm.c's model.bin + optimizer.bin (gathered) instead of shards"},
        {"--keep", "K", CLI_INT, &o->keep, 1, 1 << 20, "complete checkpoints to keep (default 2)"},
        {"--resume", "PATH", CLI_STRING, &o->resume, 0, 0,
         "continue from a checkpoint (or a --ckpt-dir's latest), any strategy and N"},
        {"--test-nan-at", "S", CLI_INT, &o->test_nan_at, 1, 1 << 30, "for tests: treat step S's loss as NaN"},
        {"--grad-clip", "C", CLI_FLOAT, &o->grad_clip, 0, FLT_MAX,
         "scale gradients by min(1, C / (norm + 1e-6)) of their global L2 norm (default 0: off)"},
        {"--lr-schedule", "constant|cosine", CLI_STRING, &o->lr_schedule, 0, 0,
         "--lr after the warmup, or a cosine down to --min-lr at the last step (default constant)"},
        {"--warmup", "W", CLI_INT, &o->warmup, 0, 1 << 30, "steps of linear warmup from 0 to --lr (default 0)"},
        {"--min-lr", "X", CLI_FLOAT, &o->min_lr, 0, FLT_MAX, "the cosine schedule's rate at the last step (default 0)"},
        {"--recompute", NULL, CLI_SWITCH, &o->recompute, 0, 0,
         "keep only each block's input; recompute its activations in backward"},
        {"--data-order", "sequential|llmc", CLI_STRING, &o->data_order, 0, 0,
         "batches in shard order, or llm.c's shuffled order (default sequential)"},
        {"--grad-accum", "K", CLI_INT, &o->grad_accum, 1, 1 << 20,
         "split each rank's rows into K micro-batches run one after another (default 1)"},
        {"--accum-mode", "sync-each|no-sync", CLI_STRING, &o->accum_mode, 0, 0,
         "ZeRO-2/3, FSDP: reduce every micro-batch into the shards, or keep whole gradients and reduce "
         "once (default sync-each; DDP and ZeRO-1 always reduce once)"},
        {"--precision", "fp32|bf16", CLI_STRING, &o->precision, 0, 0,
         "the parameters the model reads and collectives move; bf16 keeps fp32 master weights (default fp32)"},
        {"--reduce-dtype", "fp32|bf16", CLI_STRING, &o->reduce_dtype, 0, 0,
         "the gradients, as produced, reduced and kept (default: the --precision)"},
        {"--fused-classifier", NULL, CLI_SWITCH, &o->fused_classifier, 0, 0,
         "softmax, cross-entropy and its gradient in one pass, written over the logits: no (B, T, Vp) "
         "probabilities kept (docs/memory.md)"},
        {"--quiet", NULL, CLI_SWITCH, &o->quiet, 0, 0, "no progress lines"},
    };
    // a device without the fused attention (the CPU) has no such flag
    const CliOption fused = {"--fused-attention", NULL, CLI_SWITCH, &o->fused_attention, 0, 0,
                             "fuse the attention into one pass over the keys, keeping a log-sum-exp per row instead "
                             "of the (T, T) probabilities (docs/gpu.md)"};
    int n = (int)(sizeof options / sizeof options[0]);
    CHECK(n + 1 + plugin->num_flags <= OPTIONS_MAX_FLAGS, "options.c: raise OPTIONS_MAX_FLAGS to %d",
          n + 1 + plugin->num_flags);
    memcpy(flags, options, sizeof options);
    if (gpt2_device_fuses_attention()) flags[n++] = fused;
    if (plugin->num_flags > 0)  // a trainer without flags of its own has no table (memcpy wants one anyway)
        memcpy(flags + n, plugin->flags, (size_t)plugin->num_flags * sizeof *flags);
    return n + plugin->num_flags;
}

void options_dtypes(const TrainOptions *opts, DType *param_dtype, DType *grad_dtype) {
    CHECK(dtype_parse(opts->precision, param_dtype) == 0, "--precision %s", opts->precision);
    *grad_dtype = *param_dtype;
    if (opts->reduce_dtype) CHECK(dtype_parse(opts->reduce_dtype, grad_dtype) == 0, "--reduce-dtype %s", opts->reduce_dtype);
}

// The first problem with the shared flags taken together, or NULL.
static const char *shared_problem(const TrainOptions *o) {
    const char *problem = NULL;
    if (!o->config_name == !o->model_path) problem = "give exactly one of --config dN and --model FILE.bin";
    else if (o->model_path && o->vocab_size) problem = "--vocab goes with --config; a --model file has its own vocab";
    else if (!o->data_dir) problem = "--data DIR is required (make one with build/prepare)";
    else if (o->trace_prefix && !o->trace_prefix[0])
        problem = "--trace '': give a path prefix (PREFIX.json and PREFIX.tsv are written)";
    else if ((o->save_every || o->save_full) && !o->ckpt_dir) problem = "--save-every and --save-full need --ckpt-dir DIR";
    else if (strcmp(o->lr_schedule, "constant") != 0 && strcmp(o->lr_schedule, "cosine") != 0)
        problem = "--lr-schedule: give constant or cosine";
    else if (o->min_lr > 0 && strcmp(o->lr_schedule, "cosine") != 0)
        problem = "--min-lr goes with --lr-schedule cosine";
    else if (o->min_lr > o->lr) problem = "--min-lr is above --lr: the cosine decays from --lr down to --min-lr";
    else if (strcmp(o->lr_schedule, "cosine") == 0 && o->warmup > 0 && o->warmup >= o->steps)
        problem = "--warmup covers every one of the --steps: the cosine of --lr-schedule cosine would never start "
                  "(give --warmup below --steps)";
    else if (strcmp(o->data_order, "sequential") != 0 && strcmp(o->data_order, "llmc") != 0)
        problem = "--data-order: give sequential or llmc";
    else if (strcmp(o->accum_mode, "sync-each") != 0 && strcmp(o->accum_mode, "no-sync") != 0)
        problem = "--accum-mode: give sync-each or no-sync";
    else if (o->timeline_step > o->steps) problem = "--timeline-step is past --steps: give a step the run trains";
    else if (o->timeline_step && !o->log_path && !o->trace_prefix)
        problem = "--timeline-step goes with --log or --trace, where the step's memory timeline is kept";
    else if (o->eval_ema && !o->ema) problem = "--eval-ema validates the EMA weights: it needs --ema DECAY above 0";
    else if (o->eval_ema && !o->eval_every) problem = "--eval-ema goes with --eval-every K, when validation runs";
    else if (o->out_model_ema && !o->ema)
        problem = "--out-model-ema writes the EMA weights: it needs --ema DECAY above 0";
    else if (o->offload_optimizer && o->ema)
        problem = "--offload-optimizer with --ema: the moving average is kept beside the weights on the device, "
                  "and offload takes the master weights to the host; give one of them";
    else if (dtype_parse(o->precision, &(DType){0}) != 0) problem = "--precision: give fp32 or bf16";
    else if (o->reduce_dtype && dtype_parse(o->reduce_dtype, &(DType){0}) != 0)
        problem = "--reduce-dtype: give fp32 or bf16";
    return problem;
}

// A flag given that the other flags leave nothing to do (its default is no sign: it is the command line's).
static const char *idle_flag_problem(const TrainOptions *o, const CliSpec *spec) {
    if (cli_given(spec, "--keep") && !o->ckpt_dir)
        return "--keep K keeps the newest checkpoints of --ckpt-dir, which is not given: it would do nothing";
    if (cli_given(spec, "--eval-batches") && o->eval_every == 0)
        return "--eval-batches K sizes each validation, and --eval-every is 0 (none): it would do nothing";
    if (cli_given(spec, "--accum-mode") && o->grad_accum <= 1)
        return "--accum-mode says when the micro-batches' gradients are reduced, and --grad-accum is 1 (one "
               "micro-batch a step): it would do nothing";
    return NULL;
}

OptionsResult options_parse(const TrainOptions *o, const CliOption *flags, int num_flags,
                            const StrategyPlugin *plugin, int argc, char **argv, int speak, int *given) {
    char about[256];
    snprintf(about, sizeof about, "trains GPT-2 with the %s strategy.\n  --serve DIR, alone: runs the command "
             "lines sent to its sockets in DIR one after another, in this one job (run/serve.h)", plugin->name);
    CliSpec spec = {
        .synopsis = "(--config d2|d4|d6|d12 [--vocab V] | --model FILE.bin) --data DIR [options]",
        .about = about, .options = flags, .num_options = num_flags, .given = given,
    };
    CliResult r = cli_parse(&spec, argc, argv, speak);
    if (r != CLI_RUN) return r == CLI_HELP ? OPTIONS_HELP : OPTIONS_ERROR;
    // the strategy's own options first: the most specific message
    const char *problem = plugin->check_options ? plugin->check_options(plugin->options) : NULL;
    if (!problem && plugin->units) problem = unit_policy_problem(plugin->units);
    if (!problem) problem = shared_problem(o);
    if (!problem) problem = idle_flag_problem(o, &spec);
    if (problem) {
        cli_error(argv[0], speak, "%s", problem);
        return OPTIONS_ERROR;
    }
    return OPTIONS_RUN;
}
