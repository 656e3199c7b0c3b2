// bf16_products.h: how a bf16 run's matrix products take their operands, on the
// CPU (gpt2_ops.h) and on a GPU (gpt2_cuda_ops.h) alike, as tensor cores do:
//
//   weight (OC,C)   bf16 as the run keeps it       multiplied as it is
//   inp, dout       fp32 activations               rounded into `operands` first
//   sums            fp32                           out, dinp: fp32
//   dweight         the run's gradients (grad_dtype): bf16, each element's sum
//                   added to it and rounded once; or fp32
//
// So a bf16 run holds no fp32 copy of a product's weight or of its gradient.
#ifndef SHARDLAB_BF16_PRODUCTS_H
#define SHARDLAB_BF16_PRODUCTS_H

#include "device/dtype.h"

// A bf16 run's products; the layers take NULL for an fp32 run's.
typedef struct {
    bf16 *operands;   // gpt2_product_operands(rows, C, OC, backward) elements (gpt2.h)
    DType grad_dtype; // of dweight
} Bf16Products;

#endif
