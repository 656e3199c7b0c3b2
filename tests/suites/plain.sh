#!/usr/bin/env bash
# What a sanitized build cannot check (make test-plain runs it on the plain build,
# CI beside the sanitized pass): an address-space limit (AddressSanitizer cannot
# start under one) and the CUDA build's command lines (the sanitized build has no
# CUDA build). On a build that has neither, each says it skips.
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/plain.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
shared_inputs  # $tmp/byte
if [ -x "$BUILD/cuda/train_single" ]; then  # its usage needs no GPU
    if "$BUILD/cuda/train_single" --help | grep -q -- "--fused-attention"; then
        ok "the CUDA trainers take --fused-attention"; else bad "the CUDA trainers take --fused-attention"; fi
fi

# A model that cannot fit is refused before anything is allocated. An address-space
# limit makes "cannot fit" the same on every machine (AddressSanitizer cannot run under one).
if (ulimit -v 4000000 && "$BUILD/init_model" --help) >/dev/null 2>&1; then
    fails "init_model: a model beyond memory, refused at once in GB" \
        "this model \(1.678 GB of parameters, a 14.026 GB tensor table\) needs 15.703 GB of memory; [0-9.]+ GB is available" \
        sh -c "ulimit -v 4000000 && exec '$BUILD/init_model' --layers 16777216 --heads 1 --channels 1 --vocab 256 --max-seq 64 --out '$tmp/x.bin'"
else
    echo "skip init_model under ulimit -v: this build cannot start under an address-space limit"
fi

if [ -x "$BUILD/cuda/train_single" ] && ! nvidia-smi >/dev/null 2>&1; then
    fails "CUDA build without a GPU" "no GPU is visible" "$BUILD/cuda/train_single" --config d2 --vocab 256 --data "$tmp/byte"
    for tool in train_single bench_gpu; do  # the usage needs no GPU
        help_ok "cuda/$tool --help without a GPU" "$BUILD/cuda/$tool" --help
        fails "cuda/$tool: unknown flag" "unknown flag '--bogus'" "$BUILD/cuda/$tool" --bogus
    done
    fails "cuda/train_ddp: --zero-stage 3" "--zero-stage 3: ZeRO-3 has trainers of its own" "$BUILD/cuda/train_ddp" --zero-stage 3
    fails "cuda/train_fsdp: --zero-stage is unknown" "unknown flag '--zero-stage'" "$BUILD/cuda/train_fsdp" --zero-stage 1
    # make gpu-check without a GPU: every part's command lines read and refused for want of a GPU alone
    # (PyTorch with CUDA is not here: its part says skipped)
    if BUILD="$BUILD" OUT_DIR="$tmp/gpu_check" NO_BUILD=1 LLMC=/bin/true MPIRUN="$MPIRUN" bash examples/gpu_check.sh \
            > "$tmp/gpu_check.out" 2>&1 && [ "$(grep -c ' cpu-ok ' "$tmp/gpu_check/summary.txt")" = 7 ] &&
        grep -q "^torch *skipped" "$tmp/gpu_check/summary.txt"; then
        ok "gpu_check.sh without a GPU: its parts' GPU programs refused for want of a GPU alone, torch skipped"
    else
        bad "gpu_check.sh without a GPU: its parts' GPU programs refused for want of a GPU alone, torch skipped"
        tail -n 20 "$tmp/gpu_check.out"
    fi
    fails "gpu_check.sh: a budget that is not a number" "BUDGET: give whole seconds" env BUDGET=9m bash examples/gpu_check.sh
    fails "gpu_check.sh: an unknown part" "PARTS: unknown part 'bogus'" env PARTS=bogus bash examples/gpu_check.sh
fi
if [ ! -x "$BUILD/cuda/train_single" ]; then echo "skip the CUDA command lines: no CUDA build in $BUILD"; fi

finish
