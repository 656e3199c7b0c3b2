// shard_groups.h: hybrid sharding (FSDP's --shard-group M, PyTorch's
// HYBRID_SHARD). With M < N, each group of M consecutive ranks shards the model
// among itself exactly as FSDP does among all N, and after each reduce-scatter
// the ranks at the same place in every group, which hold the same slices,
// average them with one all-reduce: slow links between machines carry only that.
//
//   group 0: ranks 0..M-1 | group 1: ranks M..2M-1 | ...
//   rank r of each group: all-reduce(avg) of its reduced slices across the groups
//
// Per rank: FSDP's bytes at M ranks, 16 bytes per parameter / M (padded to M).
// Across groups per step: one all-reduce of each unit's slices (of the tensors at
// home in it), 2 (G-1)/G * 4 pad(P)/M bytes with G = N/M groups.
#ifndef SHARDLAB_SHARD_GROUPS_H
#define SHARDLAB_SHARD_GROUPS_H

#include "kit/strategy.h"
#include "kit/unit_buffers.h"

typedef struct {
    Comm *world;     // all N ranks
    int hybrid;      // M < N: the two groups below exist
    Comm group;      // the M consecutive ranks this one shards with
    Comm replicas;   // the N/M ranks, one per group, that hold the same slices
} ShardGroups;

// Groups of `shard_group` ranks of ctx->comm (0 or N: one group of all, no
// replicas), for the strategy `name` (its notes and errors). Returns the ranks
// that shard the model: this rank's group, or all.
Comm *shard_groups_init(ShardGroups *g, const StrategyContext *ctx, const char *name, int shard_group);
// Waits for a reduce-scatter within the group, if it is in flight (0: it was
// not), and averages its reduced slices with the same slices of the other
// groups (a blocking all-reduce across them; nothing more without groups).
int shard_groups_wait(ShardGroups *g, InFlight *reduce);
// 1 on the ranks of the first group (every rank without groups): every group
// holds the same slices, the first group's write checkpoints and count in the norm.
int shard_groups_first(const ShardGroups *g);
void shard_groups_free(ShardGroups *g);

#endif
