// agree.h: the ranks of a job check, before any training collective, that they
// were all started with the same options on the same model and data.
//
// A rank launched with another --steps would wait forever in a collective the
// others never call; another --batch, --lr or --seed, or another copy of the
// data, would train a wrong model without a word. So every rank describes what
// it is about to train as a list of items (the trainer, the device, each flag
// of the table that parsed its command line, digests of the model file, the
// token shards and the checkpoint to resume), rank 0 gathers the lists in one
// collective and compares them, and on any difference every rank stops with status 1 after
// rank 0 printed, per item, a line such as
//
//   shardlab: ranks disagree on --steps: rank 0 has 3, rank 1 has 6
#ifndef SHARDLAB_AGREE_H
#define SHARDLAB_AGREE_H

#include "comm/comm.h"
#include "run/data.h"
#include "run/options.h"

// Every rank calls this once, after parsing its options and loading its data
// and before the strategy's first collective. val is NULL when no validation
// set is used. Returns 1 when all ranks agree; else 0 on every rank, rank 0 having
// said where they differ.
// flags: (num_flags) the table that parsed the command line (options_flags); given: which of them it gave.
int ranks_agree(Comm *comm, const char *strategy, const CliOption *flags, const int *given, int num_flags,
                const TrainOptions *opts, const DataLoader *train, const DataLoader *val);

#endif
