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
python3 - "$tmp/data" <<'PY'
import os, random, struct, sys
os.makedirs(sys.argv[1])
rng = random.Random(0)
n = 4_000_000
with open(os.path.join(sys.argv[1], "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[rng.randrange(50257) for _ in range(n)]))
PY
if [ -n "${LLMC:-}" ]; then
    # llm.c's defaults (bf16, its fused classifier, recomputed GELU), from random d12
    # weights, on the same token file; no evaluation or sampling inside the timed steps
    (cd "$tmp" && "$LLMC" -e d12 -b "$BATCH" -t 1024 -i data/train.bin -j data/train.bin -x 12 -v 1000 -s 1000 \
        -m 1 > llmc.log 2>&1) || { tail -n 20 "$tmp/llmc.log"; echo "llm.c failed"; }
    python3 - "$tmp/llmc.log" "$BATCH" <<'PY'
import re, statistics, sys
ms = [float(m.group(1)) for m in re.finditer(r"step\s+\d+/\d+ \|.*?\|\s*([\d.]+) ms", open(sys.argv[1]).read())]
if len(ms) > 2:
    step = statistics.median(ms[2:])  # its first steps warm up
    print(f"llm.c train_gpt2cu d12 B={sys.argv[2]} T=1024 bf16: {step:.1f} ms/step, "
          f"{int(sys.argv[2]) * 1024 / step * 1e3:.0f} tokens/s (median of {len(ms) - 2} steps)")
else:
    print("llm.c: no step times in its log")
PY
fi
# the optimizer offloaded to the host (docs/offload.md): the step, and the host link fitted to pinned copies
"$cuda/bench_gpu" --config d12 --batch "$BATCH" --seq 1024 --steps 10 --precision bf16 --fused-attention \
    --offload-optimizer || echo "bench_gpu --offload-optimizer failed"
for strategy in ${STRATEGIES-single ddp zero3 fsdp}; do
    for attention in "" --fused-attention; do
        $MPIRUN -np 1 "$cuda/train_$strategy" --config d12 --data "$tmp/data" --batch "$BATCH" --seq 1024 --steps 8 \
            --precision bf16 $attention --quiet --log "$tmp/log.jsonl" || { echo "train_$strategy failed"; continue; }
        python3 - "$tmp/log.jsonl" "$strategy" "$BATCH" "$attention" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = lines[-1]
steps = [l for l in lines if "step" in l][2:]  # the first steps warm up
batch = int(sys.argv[3])
tps = len(steps) * batch * 1024 / sum(s["step_ms"] / 1e3 for s in steps)
peak = max(r["reserved_peak_bytes"] for r in summary["ranks"]) / 1e9
print(f"train_{sys.argv[2]:6s} 1 rank bf16 {sys.argv[4]} B={batch}: {tps:8.0f} tokens/s, reserved peak {peak:.2f} GB")
PY
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
