#!/usr/bin/env bash
# bench_overlap.sh: what prefetch buys ZeRO-3 and FSDP, next to DDP. For each
# vocab and rank count it trains d4 for STEPS steps with DDP, and with ZeRO-3 and
# FSDP at --prefetch 0 and 1, in ROUNDS paired rounds, and prints one table row
# per configuration: step time (each run's median step after the first; the
# median over the rounds, with its spread), the communication a rank waited for
# per step (exposed), minor page faults per step, peak accounted and reserved
# bytes per rank, and the step time over DDP's, taken within each round. A
# benchmark: its numbers are measured, not asserted (docs/comparison.md).
# Settings (environment): BUILD MPIRUN STEPS ROUNDS VOCABS RANKS TEXT OUT.
set -euo pipefail
usage="usage: [BUILD=build] [STEPS=10] [ROUNDS=3] [VOCABS=\"256 50257\"] [RANKS=\"2 4\"] [TEXT=FILE|DIR] [OUT=DIR]
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
ROUNDS=${ROUNDS:-3}
VOCABS=${VOCABS:-256 50257}
RANKS=${RANKS:-2 4}
TEXT=${TEXT:-/usr/share/common-licenses}
OUT=${OUT:-$(mktemp -d /tmp/bench_overlap.XXXXXX)}
if (( STEPS < 2 )); then echo "bench_overlap: STEPS=$STEPS: give at least 2 (the first step is not timed)" >&2; exit 1; fi
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then echo "bench_overlap: ROUNDS=$ROUNDS: give a whole number of rounds, 1 or more" >&2; exit 1; fi
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
# Paired: ROUNDS rounds, each running every configuration once in turn (A B C D E,
# A B C D E, ...), so that a slow minute of the machine falls on all of them; each
# ratio to DDP is taken within its round, and the table gives the median over the
# rounds with its spread (lowest-highest).
results="$OUT/results.jsonl"
: > "$results"
for vocab in $VOCABS; do
    for ranks in $RANKS; do
        for round in $(seq 1 "$ROUNDS"); do
            for run in "ddp -" "zero3 0" "zero3 1" "fsdp 0" "fsdp 1"; do
                read -r strategy prefetch <<< "$run"
                flags=()
                [ "$prefetch" = "-" ] || flags=(--prefetch "$prefetch")
                log="$OUT/$vocab-$ranks-$strategy-$prefetch-$round.jsonl"
                echo "bench_overlap: V=$vocab N=$ranks round $round/$ROUNDS: $strategy ${flags[*]}" >&2
                $MPIRUN -np "$ranks" "$BUILD/train_$strategy" "${flags[@]}" --config d4 --vocab "$vocab" \
                    --data "$OUT/data-$vocab" --batch 8 --seq 64 --steps "$STEPS" --quiet --log "$log"
                python3 - "$log" "$vocab" "$ranks" "$strategy" "$prefetch" "$round" >> "$results" <<'PY'
import json, statistics, sys
log, vocab, ranks, strategy, prefetch, round_ = sys.argv[1:]
lines = [json.loads(line) for line in open(log)]
steps = [l for l in lines if "step" in l]
summary = next(l for l in lines if l.get("summary"))
n, ranks_info = len(steps), summary["ranks"]
print(json.dumps({"vocab": int(vocab), "ranks": int(ranks), "strategy": strategy, "prefetch": prefetch,
                  "round": int(round_), "step_ms": statistics.median(s["step_ms"] for s in steps[1:]),
                  "exposed_ms": 1e3 * max(r["time"]["comm_wait_s"] for r in ranks_info) / n,
                  "faults": max(r["minor_faults"] for r in ranks_info) / n,
                  "peak_mb": max(r["peak_bytes"] for r in ranks_info) / 1e6,
                  "reserved_mb": max(r.get("reserved_peak_bytes", 0) for r in ranks_info) / 1e6}))
PY
            done
        done
    done
done
python3 - "$results" "$ROUNDS" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
rounds = int(sys.argv[2])
def spread(values, fmt):
    m = statistics.median(values)
    return fmt.format(m) + (f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else "")
print(f"Medians over {rounds} paired round(s), lowest-highest in brackets; step / DDP's is taken within each round.")
print()
print("| V | N | strategy | prefetch | step ms | exposed comm ms | exposed / step | minor faults / step | peak MB "
      "| reserved MB | step / DDP's |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
keys = []
for r in rows:
    key = (r["vocab"], r["ranks"], r["strategy"], r["prefetch"])
    if key not in keys:
        keys.append(key)
for key in keys:
    mine = [r for r in rows if (r["vocab"], r["ranks"], r["strategy"], r["prefetch"]) == key]
    ddp = {r["round"]: r["step_ms"] for r in rows if (r["vocab"], r["ranks"], r["strategy"]) == (key[0], key[1], "ddp")}
    ratios = [r["step_ms"] / ddp[r["round"]] for r in mine]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {spread([r['step_ms'] for r in mine], '{:.1f}')} "
          f"| {spread([r['exposed_ms'] for r in mine], '{:.1f}')} "
          f"| {statistics.median(r['exposed_ms'] / r['step_ms'] for r in mine):.0%} "
          f"| {statistics.median(r['faults'] for r in mine):.0f} | {statistics.median(r['peak_mb'] for r in mine):.1f} "
          f"| {statistics.median(r['reserved_mb'] for r in mine):.1f} | {spread(ratios, '{:.2f}')} |")
PY
