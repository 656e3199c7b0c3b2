#!/usr/bin/env bash
# The fast tier (make test-quick, a few minutes on 2 cores): the unit tests, the
# strategy files' diffs, the communication layer at 2 and 3 ranks, and every
# strategy's equivalence with its reference at N = 2 (FSDP at N = 3 too), with its
# memory and traffic formulas.
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
finish
