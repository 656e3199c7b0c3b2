// host_memory_wasi.c: the browser's planner (make web) in place of host_memory.c.
// A WebAssembly page has no resident set to read and no /proc: what it may take
// is its linear memory, which make web caps at 1 GiB, and which the planner's own
// tables (the layout, a rank's records) must fit in.
#include <stdint.h>

#include "device/memory.h"
#include "util/errors.h"

size_t mem_rss_peak_bytes(void) { return 0; }  // not known in a browser

void mem_require_host(size_t bytes, const char *what) {
    if (bytes > (size_t)1 << 30)
        fatal("%s needs %.3f GB of memory; the browser's planner keeps its tables in at most 1.074 GB (build/plan "
              "has no such limit)", what, bytes / 1e9);
}
