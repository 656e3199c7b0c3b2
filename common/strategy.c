// strategy.c: what the strategies share beyond their interface.
#include "strategy.h"

#include <stdarg.h>
#include <stdio.h>

void strategy_note(const StrategyContext *ctx, const char *fmt, ...) {
    if (ctx->quiet || ctx->comm->rank != 0) return;
    va_list args;
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
}

int prefetch_window(const GPT2Layout *layout, int prefetch) {
    int blocks = layout->num_units - 2;
    return prefetch < blocks ? prefetch : blocks;
}
