// test_hooks.h: what the tests ask of a training run that a user never does, in one place.
// The tests open windows (a rank killed while a save is under way), make a wait known (the
// optimizer's phase, for the trace) or force a failure (a step's loss NaN); the training loop
// asks here at each of those points, and with nothing set each hook does nothing.
//
//   --test-nan-at S                 step S's loss is NaN (the run must stop without saving)
//   SHARDLAB_TEST_SAVE_PAUSE_S=X    every save pauses X seconds between its shards and its manifest
//   SHARDLAB_TEST_OPTIM_DELAY_S=X   rank 1 sleeps X seconds as its optimizer phase begins
#ifndef SHARDLAB_TEST_HOOKS_H
#define SHARDLAB_TEST_HOOKS_H

typedef struct {
    int nan_at;            // 0: never
    double save_pause_s;   // 0: none
    double optim_delay_s;  // 0: none
} TestHooks;

// The flag's step, and the environment's seconds (a number of 0 to 3600, else a fatal error naming it).
void test_hooks_init(TestHooks *h, int nan_at);
// The loss the run goes on with at `step`.
double test_hook_loss(const TestHooks *h, int step, double loss);
// As the optimizer's phase begins on `rank`.
void test_hook_optim_phase(const TestHooks *h, int rank);

#endif
