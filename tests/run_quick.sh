#!/usr/bin/env bash
# The fast tier (make test-quick, a few minutes on 2 cores): the unit tests, the
# strategy files' diffs, the communication layer at 2 and 3 ranks, and every
# strategy's equivalence with its reference at N = 2 (FSDP at N = 3 too), with its
# memory and traffic formulas; NaN and inf through every op.
# `make test` runs all of these and the rest. Ends with "N passed, M failed".
cd "$(dirname "$0")/.."
. tests/testlib.sh

run_unit_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
echo "== communication layer, 2 and 3 ranks"
run "test_comm -np 2" $MPIRUN -np 2 "$BUILD/tests/test_comm"
run "test_comm -np 3: the node reductions where N divides nothing" $MPIRUN -np 3 "$BUILD/tests/test_comm"
echo "== every strategy at N = 2, and FSDP at N = 3, bit for bit their reference"
run "test_strategies, quick" env SHARDLAB_TEST_QUICK=1 python3 tests/test_strategies.py "$BUILD" "$MPIRUN"
# NaN and inf through every op (dropout, clipping, the EMA, ZeRO++'s int8 wires and hpZ's node included), which
# make test-asan-quick runs under UBSan: the run stops on the loss, nothing undefined on the way
shared_inputs
for n in 1 4; do
    fails "FSDP -np $n: --lr 1e30 with dropout, clipping, the EMA and ZeRO++ stops on a NaN loss" \
        "step 2: loss is -?nan; stopping" $MPIRUN -np $n "$BUILD/train_fsdp" --config d2 --vocab 256 --data "$tmp/byte" \
        --batch 4 --seq 16 --steps 3 --quiet --lr 1e30 --dropout 0.1 --grad-clip 1 --ema 0.9 \
        $( ((n > 1)) && echo --quantize-weights int8 --secondary-shard-group 2 --quantize-grads int8)
done
finish
