// test_hooks.c: the tests' hooks into a training run (test_hooks.h).
#include "run/test_hooks.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/errors.h"

// The seconds an environment variable gives, 0 when it is not set.
static double seconds_from_env(const char *name) {
    const char *text = getenv(name);
    if (!text) return 0;
    char *end;
    double s = strtod(text, &end);
    if (end == text || *end != '\0' || !(s >= 0 && s <= 3600))
        fatal("%s is '%s': give a number of seconds from 0 to 3600", name, text);
    return s;
}

void test_hooks_init(TestHooks *h, int nan_at) {
    *h = (TestHooks){.nan_at = nan_at, .save_pause_s = seconds_from_env("SHARDLAB_TEST_SAVE_PAUSE_S"),
                     .optim_delay_s = seconds_from_env("SHARDLAB_TEST_OPTIM_DELAY_S")};
}

double test_hook_loss(const TestHooks *h, int step, double loss) { return step == h->nan_at ? NAN : loss; }

void test_hook_optim_phase(const TestHooks *h, int rank) {
    if (h->optim_delay_s > 0 && rank == 1) usleep((useconds_t)(h->optim_delay_s * 1e6));
}
