#!/usr/bin/env bash
# make bench-gpu: GPT-2 d12 (124M) on this GPU. bench_gpu measures the peak
# matmul rates and one rank's training speed (MFU); the PyTorch eager reference
# runs the same model when torch is installed; then each strategy's trainer at
# 1 rank (NCCL) and at 4 ranks sharing the GPU (staged MPI), with tokens/s and
# the device's peak memory from the summary.
set -euo pipefail
case "${1:-}" in
    --help|-h) echo "usage: [BUILD=build] [MPIRUN=mpirun] [BATCH=16] bash examples/bench_gpu.sh   (make bench-gpu; needs a GPU)"; exit 0 ;;
    "") ;;
    *) echo "bench_gpu.sh: unexpected argument '$1' (settings come from the environment; --help)" >&2; exit 1 ;;
esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
BATCH=${BATCH:-16}
cuda=$BUILD/cuda
"$cuda/bench_gpu" --config d12 --batch "$BATCH" --seq 1024 --steps 10
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 examples/bench_torch.py --batch "$BATCH" --seq 1024 --steps 10
else
    echo "(no PyTorch with CUDA here: skipping the eager reference)"
fi
tmp=$(mktemp -d /tmp/shardlab_bench_gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/data" <<'PY'
import os, random, struct, sys
os.makedirs(sys.argv[1])
rng = random.Random(0)
n = 4_000_000
with open(os.path.join(sys.argv[1], "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[rng.randrange(50257) for _ in range(n)]))
PY
for ranks in 1 4; do
    for strategy in ddp zero3 fsdp; do
        $MPIRUN -np $ranks "$cuda/train_$strategy" --config d12 --data "$tmp/data" --batch 8 --seq 1024 --steps 6 \
            --quiet --log "$tmp/log.jsonl"
        python3 - "$tmp/log.jsonl" "$strategy" "$ranks" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = lines[-1]
steps = [l for l in lines if "step" in l][1:]  # the first step warms up
tps = len(steps) * 8 * 1024 / sum(s["step_ms"] / 1e3 for s in steps)
peak = max(r["reserved_peak_bytes"] for r in summary["ranks"]) / 1e9
print(f"{sys.argv[2]:6s} {sys.argv[3]} rank(s): {tps:8.0f} tokens/s, reserved peak {peak:.2f} GB per rank")
PY
    done
done
