// comm_nccl_stub.c: the CPU build's stand-in for comm_nccl.cu.
#include "comm_nccl.h"

#include "util/errors.h"

void comm_nccl_init(Comm *comm) {
    (void)comm;
    fatal("NCCL backend requested, but this build has no CUDA (build with nvcc present)");
}

void comm_nccl_free(Comm *comm) { (void)comm; }

void comm_nccl_split(Comm *parent, Comm *group, int color, int key) {
    (void)parent; (void)group; (void)color; (void)key;
    fatal("NCCL backend is not built");
}

CommHandle comm_nccl_start(Comm *comm, CommHandle handle, const void *send, void *recv,
                           size_t count, int root) {
    (void)comm; (void)handle; (void)send; (void)recv; (void)count; (void)root;
    fatal("NCCL backend is not built");
}

void comm_nccl_wait(Comm *comm, CommHandle *handle) {
    (void)comm; (void)handle;
    fatal("NCCL backend is not built");
}

int comm_nccl_test(void *event) {
    (void)event;
    fatal("NCCL backend is not built");
}

// Without CUDA there are no events: nothing to free or read.
void comm_nccl_event_free(void *event) { (void)event; }

void comm_nccl_event_times(Comm *comm, void **events, CommRecord *records, size_t n) {
    (void)comm; (void)events; (void)records; (void)n;
}
