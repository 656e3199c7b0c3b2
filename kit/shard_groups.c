#include "kit/shard_groups.h"

#include "util/errors.h"

Comm *shard_groups_init(ShardGroups *g, const StrategyContext *ctx, const char *name, int shard_group) {
    g->world = ctx->comm;
    int N = g->world->world, M = shard_group ? shard_group : N;
    if (M > N || N % M != 0) fatal("%s: --shard-group %d does not divide the %d ranks into equal groups", name, M, N);
    if (M == N) return g->world;
    g->hybrid = 1;  // groups of M consecutive ranks shard; the ranks at the same place in each group replicate
    int r = g->world->rank;
    comm_split(g->world, r / M * M, 1, M, 0, &g->group);     // ranks r/M*M, ..., r/M*M + M-1
    comm_split(g->world, r % M, M, N / M, 1, &g->replicas);  // ranks r%M, r%M + M, ...
    strategy_note(ctx, "%s: hybrid sharding, %d group(s) of %d rank(s): slices of 1/%d, gradients all-reduced "
                       "across the groups\n", name, N / M, M, M);
    return &g->group;
}

int shard_groups_wait(ShardGroups *g, InFlight *reduce) {
    if (!inflight_wait(reduce, g->hybrid ? &g->group : g->world)) return 0;
    if (g->hybrid) comm_all_reduce(&g->replicas, reduce->recv, reduce->recv_numel, reduce->dtype, COMM_AVG);
    return 1;
}

int shard_groups_first(const ShardGroups *g) { return !g->hybrid || g->replicas.rank == 0; }

void shard_groups_free(ShardGroups *g) {
    if (!g->hybrid) return;
    comm_free_group(&g->group);
    comm_free_group(&g->replicas);
}
