#!/usr/bin/env bash
# Exact on other machines, here (make test-portable): what differs between CPUs is
# the products' engine and the instruction set its kernels run on (oneDNN picks them
# from the CPU's feature bits; ONEDNN_MAX_CPU_ISA caps them, showing here what an older
# CPU computes, and the engine follows: OpenBLAS below AVX-512) and the threads a rank gets, so the suite runs under other instruction
# sets and thread counts than the machine's own: every strategy must stay bit for
# bit its reference (train_single --as-ranks N) under each.
#   - the equivalence tier (every strategy at N = 2, FSDP at N = 3, against its
#     reference, with its memory and traffic; DDP, ZeRO-3 and FSDP in bf16, whose
#     products run on that set's bf16 kernel or, without one, widened to fp32) under each
#     instruction set, with 1, 2 or 3 threads a rank (one count per set: every
#     count is seen);
#   - the bf16 products against their error bound (test_dtype) under each set.
# (make check, the labs' grader, for every strategy at N = 2 and 3 and the labs'
# planted bugs under each set: tests/test_labs.py, part of make test.)
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

isas="SSE41:1 AVX2:3"
grep -q avx512f /proc/cpuinfo && isas="$isas AVX512_CORE:2"  # oneDNN runs AVX-512 kernels only where the CPU has them
for pair in $isas; do
    isa=${pair%:*} threads=${pair#*:}
    echo "== ONEDNN_MAX_CPU_ISA=$isa, $threads thread(s) a rank: every strategy against its reference"
    run "test_strategies, quick, $isa, $threads thread(s)" env ONEDNN_MAX_CPU_ISA=$isa OMP_NUM_THREADS=$threads \
        SHARDLAB_TEST_QUICK=1 python3 tests/test_strategies.py "$BUILD" "$MPIRUN"
    run "test_dtype, $isa, $threads thread(s)" env ONEDNN_MAX_CPU_ISA=$isa OMP_NUM_THREADS=$threads \
        "$BUILD/tests/test_dtype"
    run "test_products: the rule's engine and entries, the widened tiles, $isa" env ONEDNN_MAX_CPU_ISA=$isa \
        OMP_NUM_THREADS=$threads "$BUILD/tests/test_products"
done
finish
