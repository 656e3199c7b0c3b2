# The pieces make bench-gpu (examples/bench_gpu.sh) and make gpu-check
# (examples/gpu_check.sh) share: sourced, not run. Each prints one result line.

# A token file of N random GPT-2 tokens in llm.c's format (header of 256 int32,
# then uint16 tokens) at DIR/train.bin: the file llm.c and the trainers read.
write_token_file() {  # DIR [N]
    python3 - "$1" "${2:-4000000}" <<'PY'
import os, random, struct, sys
os.makedirs(sys.argv[1], exist_ok=True)
rng = random.Random(0)
n = int(sys.argv[2])
with open(os.path.join(sys.argv[1], "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[rng.randrange(50257) for _ in range(n)]))
PY
}

# llm.c's median step from its log (its first two steps warm up).
llmc_result() {  # LOG BATCH
    python3 - "$1" "$2" <<'PY'
import re, statistics, sys
ms = [float(m.group(1)) for m in re.finditer(r"step\s+\d+/\d+ \|.*?\|\s*([\d.]+) ms", open(sys.argv[1]).read())]
if len(ms) > 2:
    step = statistics.median(ms[2:])
    print(f"llm.c train_gpt2cu d12 B={sys.argv[2]} T=1024 bf16: {step:.1f} ms/step, "
          f"{int(sys.argv[2]) * 1024 / step * 1e3:.0f} tokens/s (median of {len(ms) - 2} steps)")
else:
    print("llm.c: no step times in its log")
    sys.exit(1)
PY
}

# llm.c's CUDA trainer with its defaults (bf16, its fused classifier, recomputed
# GELU), from random d12 weights, on DIR/train.bin; no evaluation or sampling in
# the timed steps. Its log goes to DIR/llmc.log.
run_llmc() {  # LLMC DIR BATCH
    (cd "$2" && "$1" -e d12 -b "$3" -t 1024 -i train.bin -j train.bin -x 12 -v 1000 -s 1000 -m 1 \
        > llmc.log 2>&1) || { tail -n 20 "$2/llmc.log"; echo "llm.c failed"; return 1; }
    llmc_result "$2/llmc.log" "$3"
}

# One trainer at one rank on DIR/train.bin, d12 T = 1024: tokens/s over its
# steps after the first two, and the device's reserved peak from the summary.
run_trainer() {  # CUDA_BUILD STRATEGY DIR BATCH FLAGS...
    local cuda=$1 strategy=$2 dir=$3 batch=$4
    shift 4
    $MPIRUN -np 1 "$cuda/train_$strategy" --config d12 --data "$dir" --batch "$batch" --seq 1024 --steps 8 \
        "$@" --quiet --log "$dir/log_$strategy.jsonl" || { echo "train_$strategy $* failed"; return 1; }
    python3 - "$dir/log_$strategy.jsonl" "$strategy" "$batch" "$*" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = lines[-1]
steps = [l for l in lines if "step" in l][2:]  # the first steps warm up
batch = int(sys.argv[3])
tps = len(steps) * batch * 1024 / sum(s["step_ms"] / 1e3 for s in steps)
peak = max(r["reserved_peak_bytes"] for r in summary["ranks"]) / 1e9
print(f"train_{sys.argv[2]:6s} 1 rank {sys.argv[4]} B={batch}: {tps:8.0f} tokens/s, reserved peak {peak:.2f} GB")
PY
}
