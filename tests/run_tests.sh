#!/usr/bin/env bash
# Runs every test (make test): the unit tests, then the parts below, side by side
# in two streams (TEST_JOBS), each part's result and summary printed in order.
# SUITE="strategies plan" runs only those parts (make test SUITE=...); the keys:
#   unit comm cli plain bench strategies training agree tcp plan labs checkpoints compare portable layout zeropp web
# Ends with "N passed, M failed" and a non-zero status on failure.
# Environment: BUILD (default build), MPIRUN (the launcher, see Makefile).
cd "$(dirname "$0")/.."
. tests/testlib.sh
export BUILD MPIRUN  # the parts read them

# Every test's scratch files go under this run's own directory (TMPDIR), which a
# run that passes must leave empty: each part removes what it wrote.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/shardlab_scratch.XXXXXX")
export TMPDIR=$scratch

# The machine's busy CPU seconds (every process's, the jobs started once included, which a part's own count
# leaves out: they outlive the process that started them), from /proc/stat's ticks.
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
started_ticks=$(busy_ticks) started_s=$SECONDS

if wanted unit; then run_unit_tests; fi

# Open MPI keeps allocations until exit by design: leak checks (under
# AddressSanitizer) stay on for the unit tests above and off from here on.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# The trainers' runs of every part go to jobs started once for their launcher (tests/serve.py), which live
# here until the parts are done.
export SHARDLAB_SERVE_DIR=$scratch/jobs
mkdir "$SHARDLAB_SERVE_DIR"
trap 'python3 tests/serve.py end "$SHARDLAB_SERVE_DIR"; rm -rf "$tmp"' EXIT  # testlib.sh's, and the jobs

# The inputs several parts train on, made once.
shared_inputs
export SHARDLAB_TEST_DATA=$tmp

# Timing: alone, before the others start.
part bench "bench_step: the per-op table accounts for the step it timed" bash tests/suites/bench.sh
run_parts

# Longest first, so that the streams end together.
part strategies "strategies: equivalence, memory and traffic formulas" \
    python3 tests/test_strategies.py "$BUILD" "$MPIRUN"
part labs "labs: the planted bugs under oneDNN's instruction sets, make check at N = 1..4" \
    python3 tests/test_labs.py "$BUILD" "$MPIRUN"
part checkpoints "checkpoints: exact resume, resharding, faults" \
    python3 tests/test_checkpoints.py "$BUILD" "$tmp/byte" "$MPIRUN"
part plan "planner against measured accounting" python3 tests/test_plan.py "$BUILD" "$tmp/byte" "$MPIRUN"
part compare "make compare on tiny runs: plots and report" bash tests/suites/compare.sh
part portable "other CPUs: every strategy bit for bit its reference under other instruction sets and thread counts" \
    bash tests/run_portable.sh
part zeropp "ZeRO++: quantized weight gathers to the byte, exact where they must be, the loss held" \
    python3 tests/test_zeropp.py "$BUILD" "$MPIRUN"
part web "the planner in a browser: every panel build/plan's output, byte for byte, in headless Chromium" \
    python3 tests/test_web.py "$BUILD"
part training "training features: clipping, schedule, recompute, data order" \
    python3 tests/test_training.py "$BUILD" "$MPIRUN"
part cli "command-line errors and --help" bash tests/suites/cli.sh
part plain "what a sanitizer cannot check: an address-space limit, the CUDA command lines" bash tests/suites/plain.sh
part labs "lab-selftest: every skeleton fails, the project's own files get every point" \
    python3 labs/lab.py selftest --build "$BUILD" --mpirun "$MPIRUN"
part comm "communication layer under mpirun, llmc_check, the smallest shapes" bash tests/suites/comm.sh
part labs "the homework check and the labs' tools" bash tests/suites/labs.sh
part layout "a strategy is one folder: ddp/ copied, one registry line, graded at N = 1..4" \
    python3 tests/test_copy_strategy.py "$BUILD" "$MPIRUN"
part agree "ranks that disagree on options, model or data" python3 tests/test_agree.py "$BUILD" "$MPIRUN"
part serve "start once, run many: a served run is the command run alone" python3 tests/test_serve.py "$BUILD" "$MPIRUN"
part tcp "the network path: TCP gives the shared-memory run's results" \
    python3 tests/test_tcp.py "$BUILD" "$tmp/byte" "$MPIRUN"
run_parts

python3 tests/serve.py end "$SHARDLAB_SERVE_DIR"
if [ "$failed" -eq 0 ]; then  # else the failed parts' files stay, for a look
    # Open MPI's session directory there (ompi.HOST.UID; prte.* or pmix-* in Open MPI 5) is its own
    left=$(cd "$scratch" && find . -mindepth 1 -maxdepth 1 ! -name 'ompi.*' ! -name 'prte.*' ! -name 'pmix-*' | head -n 5)
    if [ -z "$left" ]; then ok "the tests left nothing in their scratch directory"
    else bad "the tests left nothing in their scratch directory: $(echo $left) in $scratch"; fi
    rm -rf "$scratch"
else
    echo "the failed parts' files are kept in $scratch"
fi
echo "make test: $((SECONDS - started_s)) s, $((($(busy_ticks) - started_ticks) / $(getconf CLK_TCK))) s of the machine's CPU"
finish
