// device_cuda.h: what the CUDA model code needs from the CUDA device layer.
#ifndef SHARDLAB_DEVICE_CUDA_H
#define SHARDLAB_DEVICE_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>

// The process's cuBLAS handle (one GPU per process), on the compute stream.
cublasHandle_t device_cublas(void);
// Its cuBLASLt handle: products with a fused epilogue (bias, GELU).
cublasLtHandle_t device_cublaslt(void);
// Number of thread blocks of `threads` threads covering n elements.
static inline unsigned int device_blocks(size_t n, unsigned int threads) {
    return (unsigned int)((n + threads - 1) / threads);
}

#endif
