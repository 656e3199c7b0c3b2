#!/usr/bin/env bash
# make bench-gpu: GPT-2 d12 (124M), T = 1024, on this GPU, in one run:
#   1. bench_gpu in fp32 (TF32 products) and bf16, with either attention, at
#      each of BATCHES: the peak cuBLAS rates, tokens/s, MFU, peak memory, and a
#      step's time per op;
#   2. llm.c's CUDA trainer (train_gpt2cu, built from its own repository outside
#      this tree; LLMC=path/to/train_gpt2cu) on the same token file, the reference;
#   3. each strategy's trainer at one rank (NCCL) in bf16, with either attention,
#      with tokens/s and the device's reserved peak from the summary;
#      and bench_gpu once more with the optimizer offloaded to the host;
#   4. PyTorch on the same model and batch (examples/bench_torch.py: eager with
#      the attention written out, SDPA's fused attention eager and compiled),
#      when torch with CUDA is installed.
set -euo pipefail
case "${1:-}" in
    --help|-h)
        echo "usage: [BUILD=build] [MPIRUN=mpirun] [BATCH=16] [BATCHES=\"16\"] [LLMC=train_gpt2cu]" \
             "[TORCH_RUNS=sdpa-bf16,...|none] [STRATEGIES='single ddp zero3 fsdp']" \
             "bash examples/bench_gpu.sh   (make bench-gpu; needs a GPU)"
        exit 0 ;;
    "") ;;
    *) echo "bench_gpu.sh: unexpected argument '$1' (settings come from the environment; --help)" >&2; exit 1 ;;
esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
BATCH=${BATCH:-16}
BATCHES=${BATCHES-$BATCH}
cuda=$BUILD/cuda
for batch in $BATCHES; do
    for precision in fp32 bf16; do
        for attention in "" --fused-attention; do
            "$cuda/bench_gpu" --config d12 --batch "$batch" --seq 1024 --steps 10 --precision "$precision" $attention ||
                echo "bench_gpu --batch $batch --precision $precision $attention failed"
        done
    done
done
tmp=$(mktemp -d /tmp/shardlab_bench_gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. examples/gpu_bench_lib.sh
write_token_file "$tmp/data"
if [ -n "${LLMC:-}" ]; then run_llmc "$LLMC" "$tmp/data" "$BATCH" || true; fi
# the optimizer offloaded to the host (docs/offload.md): the step, and the host link fitted to pinned copies
"$cuda/bench_gpu" --config d12 --batch "$BATCH" --seq 1024 --steps 10 --precision bf16 --fused-attention \
    --offload-optimizer || echo "bench_gpu --offload-optimizer failed"
for strategy in ${STRATEGIES-single ddp zero3 fsdp}; do
    for attention in "" --fused-attention; do
        run_trainer "$cuda" "$strategy" "$tmp/data" "$BATCH" --precision bf16 $attention || true
    done
done
if [ "${TORCH_RUNS:-}" = none ]; then
    echo "(TORCH_RUNS=none: PyTorch skipped)"
elif python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 examples/bench_torch.py --batch "$BATCH" --seq 1024 --steps 10 ${TORCH_RUNS:+--runs "$TORCH_RUNS"} ||
        echo "bench_torch.py failed"
else
    echo "(no PyTorch with CUDA here: skipping its reference)"
fi
