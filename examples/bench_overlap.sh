#!/usr/bin/env bash
# bench_overlap.sh: what prefetch buys ZeRO-3 and FSDP, next to DDP. For each
# vocab and rank count it trains d4 for STEPS steps with DDP, and with ZeRO-3 and
# FSDP at --prefetch 0 and 1, and prints one table row per run: step time (the
# median step after the first), the communication a rank waited for per step
# (exposed), minor page faults per step, peak accounted and reserved bytes per
# rank, and the step time over DDP's. A benchmark: its numbers are measured, not
# asserted; compare rows of one run (docs/comparison.md).
# Settings (environment): BUILD MPIRUN STEPS VOCABS RANKS TEXT OUT.
set -euo pipefail
usage="usage: [BUILD=build] [STEPS=10] [VOCABS=\"256 50257\"] [RANKS=\"2 4\"] [TEXT=FILE|DIR] [OUT=DIR]
       bash examples/bench_overlap.sh
  d4, global batch 8 x 64: DDP, ZeRO-3 and FSDP with --prefetch 0 and 1; prints a markdown table"
case "${1:-}" in
    --help|-h) echo "$usage"; exit 0 ;;
    "") ;;
    *) echo "bench_overlap: unexpected argument '$1' (settings come from the environment; --help)" >&2; exit 1 ;;
esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
STEPS=${STEPS:-10}
VOCABS=${VOCABS:-256 50257}
RANKS=${RANKS:-2 4}
TEXT=${TEXT:-/usr/share/common-licenses}
OUT=${OUT:-$(mktemp -d /tmp/bench_overlap.XXXXXX)}
if (( STEPS < 2 )); then echo "bench_overlap: STEPS=$STEPS: give at least 2 (the first step is not timed)" >&2; exit 1; fi
mkdir -p "$OUT"
# the data of each vocab comes from its tokenizer: byte for 256, GPT-2's BPE for 50257
for vocab in $VOCABS; do
    case "$vocab" in
        256) tokenizer=(--tokenizer byte) ;;
        50257) tokenizer=(--tokenizer gpt2 --vocab models/gpt2_vocab) ;;
        *) echo "bench_overlap: VOCABS: $vocab has no tokenizer here (give 256, byte, or 50257, GPT-2's)" >&2; exit 1 ;;
    esac
    if [ ! -f "$OUT/data-$vocab/train.bin" ]; then
        [ -f "$OUT/corpus.txt" ] || { if [ -d "$TEXT" ]; then cat "$TEXT"/* > "$OUT/corpus.txt"; else cp "$TEXT" "$OUT/corpus.txt"; fi; }
        "$BUILD/prepare" --text "$OUT/corpus.txt" "${tokenizer[@]}" --out "$OUT/data-$vocab" > /dev/null
    fi
done
echo "| V | N | strategy | prefetch | step ms | exposed comm ms | exposed / step | minor faults / step | peak MB | reserved MB | step / DDP's |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for vocab in $VOCABS; do
    for ranks in $RANKS; do
        for run in "ddp -" "zero3 0" "zero3 1" "fsdp 0" "fsdp 1"; do
            read -r strategy prefetch <<< "$run"
            flags=()
            [ "$prefetch" = "-" ] || flags=(--prefetch "$prefetch")
            log="$OUT/$vocab-$ranks-$strategy-$prefetch.jsonl"
            echo "bench_overlap: V=$vocab N=$ranks $strategy ${flags[*]}" >&2
            $MPIRUN -np "$ranks" "$BUILD/train_$strategy" "${flags[@]}" --config d4 --vocab "$vocab" \
                --data "$OUT/data-$vocab" --batch 8 --seq 64 --steps "$STEPS" --quiet --log "$log"
            python3 - "$log" "$vocab" "$ranks" "$strategy" "$prefetch" "$OUT/ddp-$vocab-$ranks.ms" <<'PY'
import json, statistics, sys
log, vocab, ranks, strategy, prefetch, ddp_file = sys.argv[1:]
lines = [json.loads(line) for line in open(log)]
steps = [l for l in lines if "step" in l]
summary = next(l for l in lines if l.get("summary"))
step_ms = statistics.median(s["step_ms"] for s in steps[1:])
n = len(steps)
ranks_info = summary["ranks"]
exposed_ms = 1e3 * max(r["time"]["comm_wait_s"] for r in ranks_info) / n
faults = max(r["minor_faults"] for r in ranks_info) / n
peak = max(r["peak_bytes"] for r in ranks_info) / 1e6
reserved = max(r.get("reserved_peak_bytes", 0) for r in ranks_info) / 1e6
if strategy == "ddp":
    open(ddp_file, "w").write(str(step_ms))
ratio = step_ms / float(open(ddp_file).read())
print(f"| {vocab} | {ranks} | {strategy} | {prefetch} | {step_ms:.1f} | {exposed_ms:.1f} | {exposed_ms / step_ms:.0%} "
      f"| {faults:.0f} | {peak:.1f} | {reserved:.1f} | {ratio:.2f} |")
PY
        done
    done
done
