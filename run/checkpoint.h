// checkpoint.h: saving and resuming training, in any strategy, at any rank count.
//
// A checkpoint is a directory DIR/step_00000010/ with a text manifest and data
// files. The data is a list of PIECES: a range of rows of one tensor, with its
// parameters, AdamW m and v (three byte ranges, each with its own CRC-32; with
// --ema a fourth, the EMA of the parameters) and the tensor's AdamW step count.
// Sharded layout: each rank writes the rows it keeps into rank_NNNNN.bin (DDP:
// rank 0 alone, replicas are equal). Full layout (--save-full): rank 0 writes
// model.bin (llm.c's checkpoint format), optimizer.bin (m and v in the same
// order) and with --ema ema.bin (the EMA weights, an llm.c model file too). Loading asks, tensor by tensor, for
// the rows this rank keeps in ITS layout and reads only the overlapping byte
// ranges, so any layout loads into any strategy at any rank count.
//
// Saving writes into step_N.tmp/, then renames it: a crash leaves the previous
// checkpoint whole. DIR/latest names the newest complete one.
#ifndef SHARDLAB_CHECKPOINT_H
#define SHARDLAB_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "models/gpt2.h"
#include "run/ckpt_manifest.h"
#include "comm/comm.h"
#include "kit/strategy.h"

typedef struct {
    const char *dir;        // --ckpt-dir
    int full;               // --save-full
    int keep;               // complete checkpoints to keep, the most recently written (0: all)
    int last_step;          // --steps: pruning never removes a later step (a branch's: the run it branched from's)
    float ema;              // the run's --ema (0: none): every piece carries the EMA weights too
    const char *precision;  // the run's --precision, recorded (a resume in another is refused)
    double pause_mid_save_s;  // tests only: a window to kill a rank while a save is in progress
} CkptSaveOptions;

// Every rank calls these. step = optimizer steps done so far.
void checkpoint_save(const CkptSaveOptions *opts, const Strategy *strategy, const GPT2Layout *layout,
                     Comm *comm, int step, uint64_t data_position, uint64_t seed);
// path: a checkpoint directory, or a --ckpt-dir whose `latest` names one; dir
// gets the checkpoint directory itself (exits if there is none).
void checkpoint_resolve(const char *path, char *dir, size_t size);
// What a save names the entry `name` of a --ckpt-dir: CKPT_NAME_STEP (step_N, a checkpoint), CKPT_NAME_TMP
// (step_N.tmp, one being written), or CKPT_NAME_OTHER; *step gets N.
enum { CKPT_NAME_OTHER, CKPT_NAME_STEP, CKPT_NAME_TMP };
int checkpoint_name_kind(const char *name, int *step);
// path: a checkpoint directory, or a --ckpt-dir holding `latest`. Fills the
// strategy's rows and step counts, and with `ema` (the run's --ema, 0: none)
// their EMA: a checkpoint without one, or of another decay, is then refused.
// A checkpoint of another `precision` (the run's --precision) is refused.
// Returns the manifest (caller frees).
void checkpoint_load(const char *path, const Strategy *strategy, const GPT2Layout *layout, Comm *comm, float ema,
                     const char *precision, CkptManifest *manifest);

#endif
