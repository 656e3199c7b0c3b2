# testlib.sh: what the shell test drivers share. Source it from the repository
# root; it sets BUILD, MPIRUN and a scratch directory $tmp, counts results, and
# `finish` prints the closing "N passed, M failed" line.
set -u
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
# The programs the tests start without mpirun start Open MPI alone (a singleton):
# the point-to-point layer the Makefile's MPIRUN picks, ob1, for them too (UCX,
# Debian's first choice, starts each 0.2 s later and carries nothing here).
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
# python3 as the directory of the interpreter it names: a version manager's shim
# (pyenv's) starts every call 0.4 s later, and the suites call it often.
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
# A job whose ranks exit non-zero (every refusal and error the tests provoke) is
# an abort for mpirun: it signals the ranks and waits odls_base_sigkill_timeout
# seconds (1 by default) before SIGKILL, though they have all exited, or are
# about to. Tests that need the grace (a SIGTERM to mpirun) give it on the
# command line, which overrides this.
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-0}
passed=0
failed=0
# /tmp whatever TMPDIR says: the suites pass paths through `setting` unquoted, so no spaces
tmp=$(mktemp -d /tmp/shardlab_tests.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Check's per-test timeouts are hang guards: its default (4 s) and the tests' own, times 10, so that a loaded
# machine cannot trip them (a test that hangs is still stopped, and named).
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60} CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10}

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }

# run NAME COMMAND...: passes when the command exits 0 (within RUN_TIMEOUT s)
run() {
    local name=$1 start=$SECONDS
    shift
    timeout "${RUN_TIMEOUT:-600}" "$@" >"$tmp/out" 2>&1
    local status=$?
    if [ $status -eq 0 ]; then ok "$name ($((SECONDS - start)) s)"
    elif [ $status -eq 124 ]; then bad "$name: hang guard: \`$*\` ran past ${RUN_TIMEOUT:-600} s and was stopped"
        tail -n 40 "$tmp/out"
    else bad "$name ($((SECONDS - start)) s)"; tail -n 40 "$tmp/out"; fi
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

# The Check suites of the unit tests and the source checks, which run_tests.sh and
# run_quick.sh both start with.
run_unit_tests() {
    echo "== unit tests"
    local unit="test_layers test_model test_optim test_dtype test_products test_quantize test_step_time test_data test_io
                test_tokenizer test_train test_errors test_partition test_cache test_unit_buffers"
    for t in $unit; do
        run "$t" "$BUILD/tests/$t"
    done
    # a unit test file that no list names would never run: test_comm runs under mpirun (tests/suites/comm.sh),
    # test_gpu and test_comm_gpu on a GPU (tests/run_gpu_tests.sh)
    for f in tests/test_*.c; do
        case " $(echo $unit) test_comm test_gpu test_comm_gpu " in
            *" $(basename "$f" .c) "*) ;;
            *) run "$(basename "$f" .c) is run by make test (tests/testlib.sh's list)" false ;;
        esac
    done
    run "test_diffs: the strategy files diff to their concept" python3 tests/test_diffs.py
    run "test_layout: folders by layer, no include circle" python3 tests/test_layout.py
    # the planner's code (the strategies, kit/, comm.c, the simulated network) needs no MPI and no BLAS
    run "build/plan links neither MPI nor a product engine" bash -c "! ldd '$BUILD/plan' | grep -Eq 'libmpi|openblas|dnnl'"
}

# setting FLAG VALUE ARGS...: prints ARGS with FLAG's value VALUE (in place of
# the one they give, else added), for a command that changes one flag of a shared
# set: a flag given twice is refused. Use unquoted, $(setting ...): no spaces in
# the arguments.
setting() {
    local flag=$1 value=$2 found=0 out=()
    shift 2
    while [ $# -gt 0 ]; do
        if [ "$1" = "$flag" ]; then out+=("$flag" "$value"); found=1; shift 2; else out+=("$1"); shift; fi
    done
    [ $found = 1 ] || out+=("$flag" "$value")
    echo "${out[@]}"
}

# shared_inputs: $tmp/small.txt (a short text) and $tmp/byte (it, prepared with the
# byte tokenizer), the inputs several parts train on: linked from
# $SHARDLAB_TEST_DATA where run_tests.sh made them once, else made here.
shared_inputs() {
    if [ -n "${SHARDLAB_TEST_DATA:-}" ]; then
        ln -s "$SHARDLAB_TEST_DATA/small.txt" "$tmp/small.txt" && ln -s "$SHARDLAB_TEST_DATA/byte" "$tmp/byte"
        return
    fi
    printf 'hello world, hello shardlab. ' > "$tmp/small.txt"
    for i in $(seq 6); do cat "$tmp/small.txt" "$tmp/small.txt" > "$tmp/s2" && mv "$tmp/s2" "$tmp/small.txt"; done
    "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --out "$tmp/byte" > /dev/null
}

# The parts of make test that run side by side: `part KEY NAME COMMAND...` queues
# one (skipped unless $SUITE is empty or names KEY); `run_parts` runs the queue
# in $TEST_JOBS streams (default 2: the machine's cores), each stream taking the
# next part not yet started, then prints every part's result and output summary
# in the queue's order, as if they had run one after another. The parts must not
# share files: each keeps its own scratch directory.
part_keys=()
part_names=()
part() {
    local key=$1 name=$2
    shift 2
    wanted "$key" || return 0
    local i=${#part_names[@]}
    part_keys+=("$key")
    part_names+=("$name")
    printf '%q ' "$@" > "$tmp/part$i.cmd"
}

# 1 if SUITE is empty or lists KEY (SUITE="strategies labs").
wanted() {
    [ -z "${SUITE:-}" ] && return 0
    local k
    for k in ${SUITE//,/ }; do [ "$k" = "$1" ] && return 0; done
    return 1
}

run_parts() {
    local n=${#part_names[@]} jobs=${TEST_JOBS:-2} s i
    echo 0 > "$tmp/part_next"
    for s in $(seq "$jobs"); do
        (
            # a part's wall time and its processes' CPU time (user, system), whole seconds: not the jobs' it
            # started once (tests/serve.py), which outlive it; make test's last line gives the machine's total
            TIMEFORMAT='%0R %0U %0S'
            while :; do
                i=$(flock "$tmp/part_next" sh -c 'i=$(cat "$1"); echo $((i + 1)) > "$1"; echo $i' _ "$tmp/part_next")
                [ "$i" -lt "$n" ] || break
                # a hang guard, three times the longest part's time under load
                { time timeout "${PART_TIMEOUT:-2700}" bash -c "$(cat "$tmp/part$i.cmd")" > "$tmp/part$i.out" 2>&1; } \
                    2> "$tmp/part$i.time"
                status=$?
                [ "$status" -eq 124 ] && echo "FAIL hang guard: the part ran past ${PART_TIMEOUT:-2700} s and was" \
                    "stopped: $(cat "$tmp/part$i.cmd")" >> "$tmp/part$i.out"
                echo "$status $(cat "$tmp/part$i.time")" > "$tmp/part$i.rc"
            done
        ) &
    done
    wait
    for i in $(seq 0 $((n - 1))); do
        local rc secs user sys
        read -r rc secs user sys < "$tmp/part$i.rc"
        echo "== ${part_names[$i]}"
        if [ "$rc" -eq 0 ]; then echo "ok   ${part_names[$i]} ($secs s, $((user + sys)) s CPU of its own processes)"
        else echo "FAIL ${part_names[$i]} ($secs s, status $rc)"; grep -E '^(FAIL|not ok)' "$tmp/part$i.out" | head -n 40
             tail -n 20 "$tmp/part$i.out"; fi
        grep -E '^[0-9]+%: Checks|^[a-z]+: [0-9]+ passed, [0-9]+ failed|^[0-9]+ passed, [0-9]+ failed' "$tmp/part$i.out" || true
        # a shell suite's checks count one by one, as they did in one script; a driver counts once
        local counts
        counts=$(tail -n 1 "$tmp/part$i.out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || true)
        if [ -n "$counts" ]; then
            passed=$((passed + ${counts%% passed*}))
            local f=${counts##*, }
            failed=$((failed + ${f%% failed} + (rc != 0 && ${f%% failed} == 0)))
        elif [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    done
    part_keys=()
    part_names=()
}

finish() {
    echo
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
