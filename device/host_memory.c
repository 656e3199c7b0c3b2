// host_memory.c: this process's memory as Linux reports it: its peak resident
// set, and what more it may take (MemAvailable, an address-space limit). The
// browser's planner has host_memory_wasi.c instead.
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "device/memory.h"
#include "util/errors.h"

size_t mem_rss_peak_bytes(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
    return (size_t)usage.ru_maxrss * 1024;  // Linux reports kilobytes
}

// The kernel's estimate of memory available without swapping (kB in /proc/meminfo).
static size_t meminfo_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    size_t bytes = SIZE_MAX;
    unsigned long long kb;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) bytes = (size_t)kb * 1024;
    fclose(f);
    return bytes;
}

// What an address-space limit (ulimit -v) leaves: the limit minus what is mapped now.
static size_t address_space_left_bytes(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    size_t mapped = (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
    return limit.rlim_cur > mapped ? (size_t)(limit.rlim_cur - mapped) : 0;
}

void mem_require_host(size_t bytes, const char *what) {
    size_t available = meminfo_available_bytes(), left = address_space_left_bytes();
    const char *source = "MemAvailable";
    if (left < available) {
        available = left;
        source = "under this process's address-space limit, ulimit -v";
    }
    if (bytes > available)
        fatal("%s needs %.3f GB of memory; %.3f GB is available (%s)", what, bytes / 1e9, available / 1e9, source);
}
