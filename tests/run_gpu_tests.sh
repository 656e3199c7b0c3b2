#!/usr/bin/env bash
# The GPU tests (make test-gpu), on a machine with a GPU: every CUDA layer
# against the CPU, llmc_check on the GPU, and the strategy and checkpoint tests
# with GPU ranks (NCCL with one rank; ranks sharing the GPU through staged MPI).
# Ends with "N passed, M failed".
set -u
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
cd "$(dirname "$0")/.."
passed=0
failed=0
tmp=$(mktemp -d /tmp/shardlab_gpu_tests.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
run() {
    local name=$1
    shift
    if timeout 1200 "$@" >"$tmp/out" 2>&1; then passed=$((passed + 1)); echo "ok   $name"
    else failed=$((failed + 1)); echo "FAIL $name"; tail -n 40 "$tmp/out"; fi
    grep -E '^[0-9]+%: Checks|passed, [0-9]+ failed' "$tmp/out" || true
}
cuda=$BUILD/cuda
run "CUDA layers against the CPU" "$cuda/test_gpu"
for ref in tests/data/torch_*; do
    run "llmc_check on the GPU: $(basename "$ref")" "$cuda/llmc_check" "$ref/model.bin" "$ref/state.bin"
done
printf 'hello world, hello shardlab. ' > "$tmp/small.txt"
for i in $(seq 10); do cat "$tmp/small.txt" "$tmp/small.txt" > "$tmp/s2" && mv "$tmp/s2" "$tmp/small.txt"; done
"$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --out "$tmp/byte" > /dev/null
run "strategies on GPU ranks" python3 tests/test_strategies.py "$cuda" "$MPIRUN"
run "checkpoints on GPU ranks" python3 tests/test_checkpoints.py "$cuda" "$tmp/byte" "$MPIRUN"
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
