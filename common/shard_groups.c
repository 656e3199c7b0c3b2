#include "shard_groups.h"

#include "util/errors.h"

Comm *shard_groups_init(ShardGroups *g, const StrategyContext *ctx, int shard_group) {
    g->world = ctx->comm;
    int N = g->world->world, S = shard_group ? shard_group : N;
    if (S > N || N % S != 0) fatal("fsdp: --shard-group %d does not divide the %d ranks into equal groups", S, N);
    if (S == N) return g->world;
    g->hybrid = 1;  // groups of S consecutive ranks shard; the ranks at the same place in each group replicate
    int r = g->world->rank;
    comm_split(g->world, r / S * S, 1, S, 0, &g->group);     // ranks r/S*S, ..., r/S*S + S-1
    comm_split(g->world, r % S, S, N / S, 1, &g->replicas);  // ranks r%S, r%S + S, ...
    strategy_note(ctx, "fsdp: hybrid sharding, %d group(s) of %d rank(s): slices of 1/%d, gradients all-reduced "
                       "across the groups\n", N / S, S, S);
    return &g->group;
}

void shard_groups_average(ShardGroups *g, void *slices, size_t count, DType dtype) {
    if (g->hybrid) comm_all_reduce(&g->replicas, slices, count, dtype, COMM_AVG);
}

int shard_groups_first(const ShardGroups *g) { return !g->hybrid || g->replicas.rank == 0; }

void shard_groups_free(ShardGroups *g) {
    if (!g->hybrid) return;
    comm_free_group(&g->group);
    comm_free_group(&g->replicas);
}
