// dry_run.c: one simulated rank (dry_run.h), set up as train_loop.c sets up a
// trainer, then `steps` training steps as train_loop.c runs them.
#include "plan/dry_run.h"

#include <stdlib.h>

#include "models/gpt2.h"
#include "device/mem_timeline.h"
#include "run/passes.h"
#include "util/errors.h"

void dry_run(const DrySetup *d, DryResult *result) {
    *result = (DryResult){0};
    SimClock clock;
    MemAccount mem = {.cache.dry = 1, .clock_now = &clock.now};
    Machine idle = {.flops_per_s = 1, .ranks_per_node = 1};  // memory alone: a clock nobody reads
    sim_clock_init(&clock, d->machine ? d->machine : &idle, d->world);
    Comm comm;
    comm_init_simulated(&comm, d->rank, d->world, &clock);
    GPT2 model;
    gpt2_init(&model, d->config, d->rows, d->seq, d->recompute, d->attention, d->classifier, &mem);
    model.grad_accum = d->micro_batches;
    model.param_dtype = d->params;
    model.grad_dtype = d->grads;
    RunSettings settings = {.offload_optimizer = d->offload_optimizer, .ema_decay = d->ema};
    StrategyContext ctx = {.model = &model, .comm = &comm, .mem = &mem, .source = {.dry = 1}, .options = d->options,
                           .quiet = 1, .accum_mode = d->accum_mode, .run = &settings};
    strategy_group_units(&ctx, d->units);
    Strategy strategy = d->init(&ctx);
    gpt2_set_batch(&model, NULL, NULL);  // a batch's shapes only: the dry ops read no token
    for (int step = 0; step < d->steps; step++) {
        CommStats before = comm.stats, before_machines = comm.machines;
        SimClock start = clock;
        mem_timeline_free(&result->timeline);  // the last step's is kept, as the trainers keep theirs
        mem_timeline_start(&result->timeline, &mem);
        if (d->machine) model.clock = settings.clock = &clock;  // the units' compute, the offloaded copies
        OffloadEarly early = {.config = adamw_config(0, 0)};
        for (int micro = 0; micro < d->micro_batches; micro++) {
            int last = micro == d->micro_batches - 1;
            forward_pass(&model, &strategy, NULL, 1);
            if (last) offload_early_begin(&settings, d->grad_clip, &early);
            backward_pass(&model, &strategy, NULL, last);
        }
        finish_pass(&model, &strategy, NULL);
        optimizer_pass(&model, &strategy, &comm, d->grad_clip, early.config, &settings);
        mem_set_phase(&mem, PHASE_SETUP, -1);
        mem_timeline_stop(&result->timeline, &mem);
        model.clock = settings.clock = NULL;
        result->last_step = comm_stats_diff(&comm.stats, &before);
        result->last_step_machines = comm_stats_diff(&comm.machines, &before_machines);
        result->time = (StepTime){.compute = clock.spent.compute - start.spent.compute,
                                  .comm = clock.spent.comm - start.spent.comm,
                                  .exposed = clock.spent.exposed - start.spent.exposed,
                                  .offload = clock.spent.offload - start.spent.offload,
                                  .step = clock.now - start.now};
    }
    strategy.destroy(strategy.state);
    gpt2_free(&model, &mem);
    comm_finalize(&comm);
    mem.clock_now = NULL;
    result->mem = mem;
}
