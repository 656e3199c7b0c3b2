// check_main.h: runs a Check suite and turns its result into an exit status.
#ifndef SHARDLAB_CHECK_MAIN_H
#define SHARDLAB_CHECK_MAIN_H

#include <check.h>

static inline int run_suite(Suite *suite) {
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? 1 : 0;
}

#endif
