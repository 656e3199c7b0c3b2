# testlib.sh: what the shell test drivers share. Source it from the repository
# root; it sets BUILD, MPIRUN and a scratch directory $tmp, counts results, and
# `finish` prints the closing "N passed, M failed" line.
set -u
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
passed=0
failed=0
tmp=$(mktemp -d /tmp/shardlab_tests.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }

# run NAME COMMAND...: passes when the command exits 0 (within RUN_TIMEOUT s)
run() {
    local name=$1
    shift
    if timeout "${RUN_TIMEOUT:-600}" "$@" >"$tmp/out" 2>&1; then ok "$name"; else bad "$name"; tail -n 40 "$tmp/out"; fi
    grep -E '^[0-9]+%: Checks|^[a-z]+: [0-9]+ passed, [0-9]+ failed|^FAIL' "$tmp/out" || true
}

# fails NAME PATTERN COMMAND...: passes when the command exits non-zero within
# 60 s (no hang), without a crash, and its stderr matches PATTERN
fails() {
    local name=$1 pattern=$2
    shift 2
    timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
    local status=$?
    if [ $status -eq 0 ]; then bad "$name (exit 0)"
    elif [ $status -eq 124 ]; then bad "$name (hung)"
    elif [ $status -gt 128 ]; then bad "$name (crashed, status $status)"; head -5 "$tmp/err"
    elif ! grep -qE -- "$pattern" "$tmp/err"; then bad "$name (message does not match '$pattern')"; head -5 "$tmp/err"
    else ok "$name: $(grep -m1 -E -- "$pattern" "$tmp/err")"; fi
}

# help_ok NAME COMMAND...: passes when the command exits 0 within 60 s, prints
# exactly one usage on stdout ("usage: ..."), and nothing on stderr
help_ok() {
    local name=$1
    shift
    if timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" && [ "$(grep -c '^usage: ' "$tmp/out")" -eq 1 ] && [ ! -s "$tmp/err" ]; then
        ok "$name"; else bad "$name"; head -5 "$tmp/out" "$tmp/err"; fi
}

# The Check suites of the unit tests, which run_tests.sh and run_quick.sh both start with.
run_unit_tests() {
    echo "== unit tests"
    for t in test_layers test_model test_optim test_dtype test_step_time test_data test_io test_tokenizer test_train \
             test_errors test_partition test_cache; do
        run "$t" "$BUILD/tests/$t"
    done
    run "test_diffs: the strategy files diff to their concept" python3 tests/test_diffs.py
}

finish() {
    echo
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
