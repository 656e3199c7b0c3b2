#include "device/dtype.h"

const char *dtype_name(DType dtype) { return dtype == DTYPE_BF16 ? "bf16" : dtype == DTYPE_INT8 ? "int8" : "fp32"; }

int dtype_parse(const char *text, DType *out) {
    if (strcmp(text, "fp32") == 0) *out = DTYPE_FP32;
    else if (strcmp(text, "bf16") == 0) *out = DTYPE_BF16;
    else return -1;
    return 0;
}
