// mpi_backend.h: what needs MPI's own types, for the files that use MPI (mpi.c, node.c,
// nccl.cu); comm.h and backend.h stay free of MPI, so that the planner builds without it.
#ifndef SHARDLAB_MPI_BACKEND_H
#define SHARDLAB_MPI_BACKEND_H

#include <mpi.h>

#include "comm/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// The MPI communicator of a group, for the uncounted host helpers (the NCCL backend keeps
// mpi.c's under it).
MPI_Comm comm_mpi_group(const Comm *comm);

#ifdef __cplusplus
}
#endif

#endif
