// mpi_check.h: every MPI call's status checked, failing with file:line, the
// call and MPI's own words for the error (comm/comm.c, comm/node.c).
#ifndef SHARDLAB_MPI_CHECK_H
#define SHARDLAB_MPI_CHECK_H

#include <mpi.h>

#include "util/errors.h"

#define MPI_CHECK(call)                                                              \
    do {                                                                             \
        int mpi_status_ = (call);                                                    \
        if (mpi_status_ != MPI_SUCCESS) {                                            \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                     \
            int mpi_len_ = 0;                                                        \
            MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                      \
            fatal_at(__FILE__, __LINE__, "MPI error in %s: %s", #call, mpi_msg_);   \
        }                                                                            \
    } while (0)

#endif
