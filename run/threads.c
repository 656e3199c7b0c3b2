#include "run/threads.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "models/gpt2_ops.h"
#include "util/errors.h"

enum { THREADS_PER_CORE_MAX = 16 };

// The cores this process may run on (taskset and cgroup cpusets included).
static int available_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int threads_cores_on_node(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int threads_configure(int ranks_on_node, int *cores) {
    int available = available_cores();
    if (cores) *cores = available;
    int threads = getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : available / (ranks_on_node > 0 ? ranks_on_node : 1);
    if (threads < 1) threads = 1;
    // Each OpenMP thread takes a stack; a count far past the cores only slows the
    // products down, and at some hundred thousand the stacks run out (a crash).
    if (threads > THREADS_PER_CORE_MAX * available)
        fatal("OMP_NUM_THREADS=%s: more than %d threads a core (this process may run on %d core%s): give at most %d",
              getenv("OMP_NUM_THREADS"), THREADS_PER_CORE_MAX, available, available == 1 ? "" : "s",
              THREADS_PER_CORE_MAX * available);
    product_choose();  // a bad SHARDLAB_PRODUCTS or ONEDNN_MAX_CPU_ISA stops here, before any work
    omp_set_num_threads(threads);
    product_set_threads(threads);
    return threads;
}
