// nccl_stub.c: the CPU build's stand-in for comm/nccl.cu, whose backend only a
// CUDA build has: comm_use_device_buffers never selects it here.
#include "comm/backend.h"
#include "util/errors.h"

void comm_nccl_init(Comm *comm) {
    (void)comm;
    fatal("NCCL backend is not built");
}

const CommBackend comm_nccl_backend = {.name = "nccl (not built)", .host = &comm_mpi_backend};
