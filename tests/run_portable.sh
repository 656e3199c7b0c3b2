#!/usr/bin/env bash
# Exact on other machines, here (make test-portable): what differs between CPUs is
# the matrix kernel OpenBLAS picks and the threads a rank gets, so the suite runs
# under other kernels and thread counts than the machine's own: every strategy must
# stay bit for bit its reference (train_single --as-ranks N) under each.
#   - the equivalence tier (every strategy at N = 2, FSDP at N = 3, against its
#     reference, with its memory and traffic) under each kernel, with 1, 2 or 3
#     threads a rank (one count per kernel: every count is seen);
#   - lab-selftest under a kernel other than the machine's own.
# (make check for every strategy at N = 1..4 and the labs' planted bugs under each
# kernel: tests/test_labs.py, part of make test.)
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

kernels="Prescott:1 Haswell:2 Zen:3"
grep -q avx512f /proc/cpuinfo && kernels="$kernels SkylakeX:2"  # OpenBLAS runs AVX-512 kernels only where the CPU has them
for pair in $kernels; do
    kernel=${pair%:*} threads=${pair#*:}
    echo "== OPENBLAS_CORETYPE=$kernel, $threads thread(s) a rank: every strategy against its reference"
    run "test_strategies, quick, $kernel, $threads thread(s)" env OPENBLAS_CORETYPE=$kernel OMP_NUM_THREADS=$threads \
        SHARDLAB_TEST_QUICK=1 python3 tests/test_strategies.py "$BUILD" "$MPIRUN"
done
echo "== lab-selftest under OPENBLAS_CORETYPE=Zen, 2 threads a rank"
run "lab-selftest, Zen" env OPENBLAS_CORETYPE=Zen OMP_NUM_THREADS=2 python3 labs/lab.py selftest --build "$BUILD" \
    --mpirun "$MPIRUN"
finish
