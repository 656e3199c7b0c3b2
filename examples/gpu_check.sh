#!/usr/bin/env bash
# make gpu-check: everything one session on a lent GPU must see, in one call of
# at most BUDGET seconds (default 540: 9 minutes), each part under its own
# timeout and none past the budget:
#   build    make gpu once (NO_BUILD=1: BUILD already holds a build for this GPU)
#   test     test_gpu: every CUDA kernel against the CPU, outputs poisoned with NaN
#   memcheck compute-sanitizer's memcheck on one training step (d2): fp32, and bf16
#            with each attention
#   test-gpu make test-gpu's quick form (SHARDLAB_TEST_QUICK=1)
#   bench    bench_gpu d12, B = 16, T = 1024: fp32/TF32 and bf16, each attention
#            and classifier, the step's time per op
#   llmc     llm.c's train_gpt2cu on the same token file (LLMC=its binary, or
#            LLMC_SRC=its repository, built in this part; under CUDA 13 its
#            source needs the two edits docs/gpu.md names)
#   trainers each strategy's trainer at one rank (NCCL), d12, with TRAINER_FLAGS
#            (default --precision bf16 --fused-classifier)
#   torch    PyTorch torch.compile + SDPA in bf16, when torch with CUDA imports
# Logs go to OUT_DIR (default runs/gpu-check), one per part, and a table of the
# parts, their verdicts (ok, skipped: nothing to run it with, FAILED, TIMED OUT)
# and seconds is printed last and kept as OUT_DIR/summary.txt. BUILD is the
# repository's; LLMC, LLMC_SRC and OUT_DIR may be relative to where it is run.
# Without a GPU the GPU programs each part would run must refuse with "no GPU is
# visible" alone (their flags are read first), so a run here finds a wrong flag
# or a missing program before the GPU's minutes are spent; the part then reads
# "cpu-ok". (The quick GPU suite runs only test_gpu then, PyTorch's script is
# only parsed, llm.c's binary only looked for.)
set -uo pipefail
usage="usage: [BUILD=build] [NO_BUILD=1] [OUT_DIR=runs/gpu-check] [BUDGET=540] [PARTS=\"build test memcheck test-gpu bench llmc trainers torch\"]
       [LLMC=train_gpt2cu | LLMC_SRC=llm.c] [MPIRUN=mpirun] [BATCH=16] [TRAINER_FLAGS=\"--precision bf16 ...\"]
       bash examples/gpu_check.sh   (make gpu-check)"
case "${1:-}" in
    --help|-h) echo "$usage"; exit 0 ;;
    "") ;;
    *) echo "gpu_check.sh: unexpected argument '$1' (settings come from the environment; --help)" >&2; exit 1 ;;
esac
# paths given relative to where this runs, made absolute before the cd
absolute() { case "$1" in /*) echo "$1" ;; */*) echo "$PWD/$1" ;; *) command -v "$1" || echo "$PWD/$1" ;; esac; }
[ -z "${LLMC:-}" ] || LLMC=$(absolute "$LLMC")
case "${LLMC_SRC:-/}" in /*) ;; *) LLMC_SRC=$PWD/$LLMC_SRC ;; esac
case "${OUT_DIR:-/}" in /*) ;; *) OUT_DIR=$PWD/$OUT_DIR ;; esac
OUT_DIR=${OUT_DIR:-runs/gpu-check}  # the default: the repository's runs/
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BUDGET=${BUDGET:-540}
case "$BUDGET" in ''|*[!0-9]*) echo "gpu_check.sh: BUDGET: give whole seconds, not '$BUDGET'" >&2; exit 1 ;; esac
MPIRUN=${MPIRUN:-mpirun}
BATCH=${BATCH:-16}
TRAINER_FLAGS=${TRAINER_FLAGS:---precision bf16 --fused-classifier}
ALL_PARTS="build test memcheck test-gpu bench llmc trainers torch"
PARTS=${PARTS:-$ALL_PARTS}
for part in $PARTS; do
    case " $ALL_PARTS " in *" $part "*) ;; *) echo "gpu_check.sh: PARTS: unknown part '$part' (parts: $ALL_PARTS)" >&2; exit 1 ;; esac
done
cuda=$BUILD/cuda
mkdir -p "$OUT_DIR" || exit 1
tmp=$(mktemp -d /tmp/shardlab_gpu_check.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
. examples/gpu_bench_lib.sh
if timeout 20 nvidia-smi > "$OUT_DIR/nvidia-smi.log" 2>&1; then have_gpu=1; else have_gpu=0; fi
summary=$OUT_DIR/summary.txt
: > "$summary"
failed=0
deadline=$(($(date +%s) + BUDGET))
SKIPPED=3  # a part's exit status for "nothing to run it with"

# part NAME SECONDS COMMAND...: runs COMMAND under a timeout (the part's
# SECONDS, or what is left of BUDGET if less), its output in OUT_DIR/NAME.log
# and on the terminal. A part with under 10 s left does not start.
part() {
    local name=$1 limit=$2 start rc verdict left
    shift 2
    case " $PARTS " in *" $name "*) ;; *) return 0 ;; esac
    start=$(date +%s)
    left=$((deadline - start - 5))  # the kill's grace
    [ $left -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        printf '%-9s %-16s %4d s\n' "$name" "NOT RUN (budget)" 0 >> "$summary"; failed=1; return
    fi
    echo "== $name (at most ${limit} s): $*"
    timeout --kill-after=5 "$limit" bash -c '"$@"' part "$@" < /dev/null 2>&1 | tee "$OUT_DIR/$name.log"
    rc=${PIPESTATUS[0]}
    if [ $rc = 0 ] && [ $have_gpu = 1 ]; then verdict=ok
    elif [ $rc = 0 ]; then verdict=cpu-ok
    elif [ $rc = $SKIPPED ]; then verdict=skipped
    elif [ $rc = 124 ] || [ $rc = 137 ]; then verdict="TIMED OUT"; failed=1
    else verdict="FAILED (exit $rc)"; failed=1; fi
    printf '%-9s %-16s %4d s\n' "$name" "$verdict" $(($(date +%s) - start)) >> "$summary"
}

# gpu COMMAND...: runs a GPU program; without a GPU, passes when the program
# refuses for want of one alone (its flags were read and taken first).
gpu() {
    [ $have_gpu = 1 ] && { "$@"; return; }
    local out
    out=$("$@" 2>&1) && { echo "$out"; echo "ran without a GPU: $*"; return 1; }
    if grep -q "no GPU is visible" <<< "$out"; then echo "refused for want of a GPU alone: $*"; return 0; fi
    echo "$out"
    return 1
}

# The parts' commands, as functions so that each runs whole under its timeout.
build() {
    [ "${NO_BUILD:-0}" = 1 ] || make -j"$(nproc)" gpu BUILD="$BUILD"
}
one_step_memcheck() {  # the first step of a small model, every kernel once; --fused-* where the precision suits
    local sanitizer=""
    # NCCL probes its kernels at start-up, and each probe a GPU lacks is a failed API call: not ours
    [ $have_gpu = 0 ] || sanitizer="compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 --print-limit 20"
    write_token_file "$tmp/small" 200000 || return 1
    for flags in "--precision fp32" "--precision bf16 --fused-classifier" "--precision bf16 --fused-attention"; do
        echo "-- $flags"
        gpu $sanitizer "$cuda/train_single" --config d2 --data "$tmp/small" --batch 4 --seq 64 --steps 1 $flags \
            --quiet || return 1
    done
}
quick_test_gpu() {
    [ $have_gpu = 1 ] || { gpu "$cuda/test_gpu"; return; }
    SHARDLAB_TEST_QUICK=1 BUILD="$BUILD" MPIRUN="$MPIRUN" bash tests/run_gpu_tests.sh
}
bench() {
    local rc=0
    for flags in "--precision fp32" "--precision bf16" "--precision bf16 --fused-classifier" \
                 "--precision bf16 --fused-attention" "--precision bf16 --fused-attention --fused-classifier"; do
        echo "-- bench_gpu $flags"
        gpu "$cuda/bench_gpu" --config d12 --batch "$BATCH" --seq 1024 --steps 10 $flags || rc=1
    done
    return $rc
}
llmc() {
    local bin=${LLMC:-${LLMC_SRC:+$LLMC_SRC/train_gpt2cu}}
    [ -n "$bin" ] || { echo "(no LLMC or LLMC_SRC: llm.c skipped)"; return $SKIPPED; }
    if [ -n "${LLMC_SRC:-}" ] && [ -z "${LLMC:-}" ] && [ $have_gpu = 1 ]; then
        make -C "$LLMC_SRC" train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 > "$tmp/llmc_build.log" 2>&1 ||
            { tail -n 20 "$tmp/llmc_build.log"; echo "llm.c did not build (docs/gpu.md: CUDA 13 needs two edits)"; return 1; }
    fi
    [ -x "$bin" ] || [ -n "${LLMC_SRC:-}" ] || { echo "llm.c: $bin is not an executable"; return 1; }
    [ $have_gpu = 1 ] || { echo "llm.c: $bin; it needs a GPU to run"; return 0; }
    write_token_file "$tmp/data" || return 1
    run_llmc "$bin" "$tmp/data" "$BATCH"
}
trainers() {
    local rc=0
    write_token_file "$tmp/data" || return 1
    for strategy in single ddp zero3 fsdp; do
        if [ $have_gpu = 1 ]; then
            run_trainer "$cuda" "$strategy" "$tmp/data" "$BATCH" $TRAINER_FLAGS || rc=1
        else
            gpu $MPIRUN -np 1 "$cuda/train_$strategy" --config d12 --data "$tmp/data" --batch "$BATCH" --seq 1024 \
                --steps 8 $TRAINER_FLAGS --quiet || rc=1
        fi
    done
    return $rc
}
torch_compiled() {
    if ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
        python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" examples/bench_torch.py || return 1
        echo "(no PyTorch with CUDA here: its reference skipped)"
        return $SKIPPED
    fi
    python3 examples/bench_torch.py --batch "$BATCH" --seq 1024 --steps 10 --runs compile-bf16
}

export BUILD OUT_DIR MPIRUN BATCH TRAINER_FLAGS LLMC LLMC_SRC SKIPPED cuda tmp have_gpu
export -f gpu build one_step_memcheck quick_test_gpu bench llmc trainers torch_compiled \
    write_token_file llmc_result run_llmc run_trainer
part build 240 build
part test 120 gpu "$cuda/test_gpu"
part memcheck 120 one_step_memcheck
part test-gpu 150 quick_test_gpu
part bench 120 bench
part llmc 60 llmc
part trainers 120 trainers
part torch 150 torch_compiled
grep -h "tokens/s" "$OUT_DIR"/bench.log "$OUT_DIR"/llmc.log "$OUT_DIR"/trainers.log "$OUT_DIR"/torch.log 2>/dev/null
echo "== summary ($(sed -n 's/.*\(NVIDIA [A-Z0-9]*\).*/\1/p' "$OUT_DIR/nvidia-smi.log" | head -n 1 || true))"
cat "$summary"
exit $failed
