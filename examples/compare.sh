#!/usr/bin/env bash
# compare.sh: the main job behind `make compare`. Trains the same GPT-2 with
# train_single and with DDP, ZeRO-1, ZeRO-2, ZeRO-3 and FSDP (or the STRATEGIES
# given) at RANKS ranks, then writes plots and a report under runs/<name>/.
# Settings (environment): RANKS CONFIG STEPS BATCH SEQ NAME BUILD MPIRUN TEXT RUNS STRATEGIES PRECISION ARGS ZEROPP.
# ARGS: more flags for every trainer, the ones they all take (ARGS="--ema 0.99 --eval-ema").
# ZEROPP=1 also trains FSDP with each of ZeRO++'s changes and with all three (docs/zeropp.md), for the
# report's measured ZeRO++ table: nodes of H = RANKS/2 ranks (1 where RANKS is odd).
# PRECISION=bf16 trains every run in bf16 (docs/precision.md) and train_single once
# more in fp32, for the report to say how far bf16 goes from it.
set -euo pipefail
usage="usage: [RANKS=4] [CONFIG=d4] [STEPS=20] [BATCH=8] [SEQ=64] [NAME=...] [TEXT=FILE|DIR] [RUNS=runs]
       [STRATEGIES=\"ddp zero1 zero2 zero3 fsdp\"] [PRECISION=fp32|bf16] [ARGS=\"--ema 0.99 ...\"] [ZEROPP=0|1]
       bash examples/compare.sh
  trains train_single and the strategies side by side and writes RUNS/NAME/report.md (docs/plots.md);
  settings come from the environment (also BUILD and MPIRUN), not from flags"
case "${1:-}" in
    --help|-h) echo "$usage"; exit 0 ;;
    "") ;;
    *) echo "compare: unexpected argument '$1' (settings come from the environment; --help)" >&2; exit 1 ;;
esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-4}
CONFIG=${CONFIG:-d4}
STEPS=${STEPS:-20}
BATCH=${BATCH:-8}
SEQ=${SEQ:-64}
MPIRUN=${MPIRUN:-mpirun}
# The default corpus ships with every Debian system: the license texts of base-files.
TEXT=${TEXT:-/usr/share/common-licenses}
RUNS=${RUNS:-runs}
# The strategies and their trainers: build/plan --strategies (run/registry.h).
declare -A trainer_of preset_of
ladder=()
registry=$("$BUILD/plan" --strategies) || { echo "compare: $BUILD/plan --strategies failed (make builds it)" >&2; exit 1; }
# (fields split at '|': tabs, being white space to read, would merge an empty preset away)
while IFS='|' read -r name trainer preset; do
    ladder+=("$name") trainer_of[$name]=$trainer preset_of[$name]=$preset
done < <(awk -F'\t' '!/^#/ {print $1 "|" $3 "|" $4}' <<< "$registry")
STRATEGIES=${STRATEGIES:-${ladder[*]}}
# The command that trains STRATEGY, into `trainer` (zero1: train_ddp --zero-stage 1).
trainer_for() {
    local preset
    read -r -a preset <<< "${preset_of[$1]}"
    trainer=("$BUILD/${trainer_of[$1]}" ${preset[@]+"${preset[@]}"})
}
PRECISION=${PRECISION:-fp32}
read -r -a extra <<< "${ARGS:-}"
# A trainer refuses a flag given twice: the ones compare sets itself come from its settings.
for flag in ${extra[@]+"${extra[@]}"}; do
    case "$flag" in
        --config|--vocab|--data|--steps|--batch|--seq|--precision|--eval-every|--eval-batches|--log|--trace|--out-model)
            setting=$(case "$flag" in --config) echo CONFIG;; --steps) echo STEPS;; --batch) echo BATCH;;
                      --seq) echo SEQ;; --precision) echo PRECISION;; *) echo "";; esac)
            echo "compare: ARGS: $flag is compare's own${setting:+ (give $setting=...)}: leave it out of ARGS" >&2
            exit 1 ;;
    esac
done
# "${args[@]}" without FLAG and its value, into `kept`.
without() {
    local flag=$1 skip=0 a
    shift
    kept=()
    for a in "$@"; do
        if (( skip )); then skip=0; continue; fi
        if [ "$a" = "$flag" ]; then skip=1; [ "$flag" = --eval-ema ] && skip=0; continue; fi
        kept+=("$a")
    done
}
case "$PRECISION" in
    fp32|bf16) ;;
    *) echo "compare: PRECISION=$PRECISION: give fp32 or bf16" >&2; exit 1 ;;
esac
read -r -a strategies <<< "$STRATEGIES"
if (( ${#strategies[@]} == 0 )); then
    echo "compare: STRATEGIES is empty (choose from ${ladder[*]})" >&2
    exit 1
fi
seen=" "
for strategy in "${strategies[@]}"; do
    if [ -z "${trainer_of[$strategy]+set}" ]; then
        echo "compare: STRATEGIES: unknown strategy '$strategy' (choose from ${ladder[*]})" >&2
        exit 1
    fi
    if [[ "$seen" == *" $strategy "* ]]; then
        echo "compare: STRATEGIES: '$strategy' is listed twice" >&2
        exit 1
    fi
    seen+="$strategy "
done
ZEROPP=${ZEROPP:-0}
case "$ZEROPP" in
    0) ;;
    1) if [[ "$seen" != *" fsdp "* ]]; then
           echo "compare: ZEROPP=1 adds ZeRO++'s runs beside FSDP's: STRATEGIES must include fsdp" >&2; exit 1; fi
       if (( RANKS < 2 )); then
           echo "compare: ZEROPP=1 needs RANKS=2 or more (hpZ's node is smaller than the ranks that shard)" >&2; exit 1; fi ;;
    *) echo "compare: ZEROPP=$ZEROPP: give 0 or 1" >&2; exit 1 ;;
esac
NAME=${NAME:-$CONFIG-n$RANKS-$PRECISION-$(date +%Y%m%d-%H%M%S)}
RUN=$RUNS/$NAME
DATA=$RUNS/data-$(basename "$TEXT")

if (( BATCH % RANKS != 0 )); then
    echo "compare: BATCH=$BATCH is not divisible by RANKS=$RANKS (try BATCH=$(( (BATCH / RANKS + 1) * RANKS )))" >&2
    exit 1
fi
if [ -e "$RUN" ]; then
    echo "compare: $RUN already exists; not overwriting it (choose another NAME=...)" >&2
    exit 1
fi
if [ ! -f "$DATA/train.bin" ]; then
    echo "== preparing data from $TEXT into $DATA"
    mkdir -p "$RUNS"
    if [ -d "$TEXT" ]; then cat "$TEXT"/* > "$RUNS/corpus.txt"; else cp "$TEXT" "$RUNS/corpus.txt"; fi
    "$BUILD/prepare" --text "$RUNS/corpus.txt" --tokenizer byte --out "$DATA"
fi
mkdir -p "$RUN"
common=(--config "$CONFIG" --vocab 256 --data "$DATA" --steps "$STEPS" --batch "$BATCH" --seq "$SEQ"
        --eval-every 10 --eval-batches 2 --precision "$PRECISION" ${extra[@]+"${extra[@]}"})
echo "== single rank (the reference)"
"$BUILD/train_single" "${common[@]}" --log "$RUN/single.jsonl" --trace "$RUN/single.trace" --out-model "$RUN/single.bin"
if [ "$PRECISION" = bf16 ]; then
    echo "== single rank in fp32 (how far bf16 goes)"
    without --precision "${common[@]}"
    "$BUILD/train_single" "${kept[@]}" --precision fp32 --log "$RUN/single_fp32.jsonl"
fi
for strategy in "${strategies[@]}"; do
    echo "== $strategy on $RANKS ranks"
    trainer_for "$strategy"
    $MPIRUN -np "$RANKS" "${trainer[@]}" "${common[@]}" --log "$RUN/$strategy.jsonl" --trace "$RUN/$strategy.trace"
done
if [ "$ZEROPP" = 1 ]; then  # FSDP with ZeRO++'s changes: nodes of H ranks, qgZ in two hops where H > 1
    H=$(( RANKS % 2 == 0 ? RANKS / 2 : 1 ))
    hops=""; (( H > 1 )) && hops="--quantize-grads-node $H"
    mkdir -p "$RUN/zeropp"
    for entry in "qwz|--quantize-weights int8" "hpz|--secondary-shard-group $H" "qgz|--quantize-grads int4 $hops" \
                 "all|--quantize-weights int8 --secondary-shard-group $H --quantize-grads int4 $hops"; do
        read -r -a flags <<< "${entry#*|}"
        echo "== fsdp ${flags[*]} on $RANKS ranks (ZeRO++)"
        trainer_for fsdp
        $MPIRUN -np "$RANKS" "${trainer[@]}" "${common[@]}" "${flags[@]}" --quiet --log "$RUN/zeropp/${entry%%|*}.jsonl"
    done
fi
# More ranks than cores take turns on the cores: their tokens/s and waits measure the
# time-slicing as much as the strategy. Speed is then measured again with as many ranks
# as there are cores (the largest such N that divides the batch), 10 steps each.
cores=$(getconf _NPROCESSORS_ONLN)  # the machine's online cores, as the logs' cores_on_node
if (( RANKS > cores && cores > 1 )); then
    speed_ranks=$cores
    while (( BATCH % speed_ranks != 0 )); do speed_ranks=$((speed_ranks - 1)); done
    if (( speed_ranks > 1 )); then
        mkdir -p "$RUN/speed"
        # fewer steps, without validation, so without ARGS's --eval-ema either
        without --eval-ema "${common[@]}" && without --eval-every "${kept[@]}" && without --eval-batches "${kept[@]}" &&
            without --steps "${kept[@]}"
        speed_common=("${kept[@]}")
        for strategy in "${strategies[@]}"; do
            echo "== $strategy on $speed_ranks ranks, one per core (speed)"
            trainer_for "$strategy"
            $MPIRUN -np "$speed_ranks" "${trainer[@]}" "${speed_common[@]}" --steps $(( STEPS < 10 ? STEPS : 10 )) \
                --eval-every 0 --quiet --log "$RUN/speed/$strategy.jsonl"
        done
    fi
fi
if (( RANKS > 1 )); then
    echo "== bench_comm on $RANKS ranks (the step-time model's link)"
    $MPIRUN -np "$RANKS" "$BUILD/bench_comm" --max-mib 8 > "$RUN/bench_comm.txt"
fi
echo "== text sampled from the reference model"
"$BUILD/sample" --model "$RUN/single.bin" --prompt "The " --tokens 200 --temperature 0.8 --seed 1 | tee "$RUN/sample.txt"
echo "== plots and report"
python3 examples/report.py "$RUN" --build "$BUILD" --strategies "$(IFS=,; echo "${strategies[*]}")"
echo "report: $RUN/report.md (open $RUN/report.html in a browser)"
