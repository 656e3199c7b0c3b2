#!/usr/bin/env bash
# The GPU tests (make test-gpu), on a machine with a GPU: every CUDA layer
# against the CPU, llmc_check on the GPU, and the strategy, checkpoint and
# training-feature tests with GPU ranks (NCCL with one rank; ranks sharing the GPU through staged MPI).
# SHARDLAB_TEST_QUICK=1 (make gpu-check): the strategies as make test-quick runs
# them, exact resume of one run of each kind, no training-feature suite.
# Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
RUN_TIMEOUT=1200
. tests/testlib.sh

cuda=$BUILD/cuda
# plain fp32 products: with TF32 a product's rounding depends on its shape, and
# ranks multiply smaller batches than the single-rank reference
export NVIDIA_TF32_OVERRIDE=0
# every run on its own: a job that serves many runs (tests/serve.py) has not run on a GPU yet
export SHARDLAB_TEST_SERVE=0
run "CUDA layers against the CPU" "$cuda/test_gpu"
for n in 1 2 3; do run "collectives on device buffers, $n rank(s)" $MPIRUN -np $n "$cuda/test_comm_gpu"; done
for ref in tests/data/torch_*; do
    run "llmc_check on the GPU: $(basename "$ref")" "$cuda/llmc_check" "$ref/model.bin" "$ref/state.bin"
done
printf 'hello world, hello shardlab. ' > "$tmp/small.txt"
for i in $(seq 10); do cat "$tmp/small.txt" "$tmp/small.txt" > "$tmp/s2" && mv "$tmp/s2" "$tmp/small.txt"; done
"$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --out "$tmp/byte" > /dev/null
run "strategies on GPU ranks" python3 tests/test_strategies.py "$cuda" "$MPIRUN" 36
run "checkpoints on GPU ranks" python3 tests/test_checkpoints.py "$cuda" "$tmp/byte" "$MPIRUN"
if [ "${SHARDLAB_TEST_QUICK:-}" = 1 ]; then echo "(quick: the training-feature suite skipped)"
else run "training features on GPU ranks" python3 tests/test_training.py "$cuda" "$MPIRUN" 36 "$BUILD"; fi
finish
