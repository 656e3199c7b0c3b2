#!/usr/bin/env bash
# The homework check and the labs' tools: their refusals, make check on the project's own files, lab-start.
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/labs.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
echo "== the homework check and the labs"
help_ok "check.py --help" python3 labs/check.py --help
help_ok "lab.py --help" python3 labs/lab.py --help
fails "check.py: an unknown strategy" "--strategy: give one of ddp, zero1, zero2, zero3, fsdp" python3 labs/check.py \
    --strategy zero4 --ranks 2
fails "check.py: no ranks" "--ranks: give a number of ranks from 1 to 16" python3 labs/check.py --strategy fsdp --ranks 0
fails "check.py: unknown flag" "unknown argument '--bogus'" python3 labs/check.py --strategy fsdp --ranks 2 --bogus 1
fails "check.py: --ranks in digits that are not ASCII" "--ranks: give a number of ranks from 1 to 16 \(got ²\)" \
    python3 labs/check.py --strategy fsdp --ranks ²
fails "check.py: a flag given twice" "--ranks given twice" python3 labs/check.py --strategy fsdp --ranks 2 --ranks 3
fails "check.py: an --mpirun with an unbalanced quote" "--mpirun \"mpirun 'x\": No closing quotation" \
    python3 labs/check.py --strategy fsdp --ranks 2 --mpirun "mpirun 'x"
ln -s "$tmp/nowhere" "$tmp/dangling_work"
fails "check.py: a --work that is a link to nothing" "--work $tmp/dangling_work: not a directory \(a link to nothing\)" \
    python3 labs/check.py --strategy ddp --ranks 2 --work "$tmp/dangling_work"
mkdir "$tmp/garbage_ref" && printf '#!/bin/sh\necho garbage\n' > "$tmp/garbage_ref/plan" && chmod +x "$tmp/garbage_ref/plan"
fails "check.py: a --reference whose plan prints no table" "--strategies printed 'garbage', not a line of the strategies' table" \
    python3 labs/check.py --strategy ddp --ranks 2 --reference "$tmp/garbage_ref"
fails "check.py: a count in digits that are not ASCII" "--args: --grad-accum ١: give a whole number >= 1" \
    python3 labs/check.py --strategy zero3 --ranks 2 --args "--grad-accum ١"
fails "check.py: an --ema that single precision makes 0" "--args: --ema 1e-400: give a number in \[0, 0.999999\] that single precision keeps" \
    python3 labs/check.py --strategy fsdp --ranks 2 --args "--ema 1e-400"
for timeout in "" abc 2.5 0 -5; do
    fails "check.py: SHARDLAB_CHECK_TIMEOUT='$timeout'" "SHARDLAB_CHECK_TIMEOUT is '$timeout': give the seconds" \
        env SHARDLAB_CHECK_TIMEOUT="$timeout" python3 labs/check.py --strategy fsdp --ranks 2
done
fails "check.py: a trainer flag the strategy does not take" "--args: --prefetch: ddp does not take it" \
    python3 labs/check.py --strategy ddp --ranks 2 --args "--prefetch 2"
fails "check.py: a flag the check does not pass on" "--args: --steps is not a flag the check passes on" \
    python3 labs/check.py --strategy ddp --ranks 2 --args "--steps 5"
fails "check.py: --accum-mode with one micro-batch" "--args: --accum-mode says when the micro-batches' gradients are reduced" \
    python3 labs/check.py --strategy ddp --ranks 2 --args "--accum-mode no-sync"
fails "lab.py: an unknown lab" "grade: give one of the labs: ddp, zero12, zero3, fsdp, prefetch" python3 labs/lab.py grade lab9
fails "lab.py: an unknown command" "unknown command 'begin'" python3 labs/lab.py begin fsdp
fails "make check without STRATEGY" "give STRATEGY=name" make --no-print-directory check BUILD="$BUILD" GPU=0
# make check on the project's own strategies passes every check, at N = 2 and with flags; a planted bug fails the
# checks it should, saying what it means
if MPIRUN="$MPIRUN" python3 labs/check.py --strategy fsdp --ranks 2 --build "$BUILD" --work "$tmp/check_fsdp" >"$tmp/out" 2>&1 &&
   grep -q "check: 7 of 7 checks pass" "$tmp/out" &&
   MPIRUN="$MPIRUN" python3 labs/check.py --strategy zero3 --ranks 3 --args "--prefetch 2 --precision bf16 --grad-accum 2" \
       --build "$BUILD" --work "$tmp/check_zero3" >"$tmp/out" 2>&1 && grep -q "check: 7 of 7 checks pass" "$tmp/out"
then ok "check.py: fsdp at N = 2 and zero3 at N = 3 with flags pass every check"
else bad "check.py: fsdp at N = 2 and zero3 at N = 3 with flags pass every check"; cat "$tmp/out"; fi
# the newer flags: dropout and the EMA (train_single takes them too), units and whole small tensors; with two
# micro-batches, which tell a whole tensor's average (kept, added into) from a slice's (the reference's twin
# --as-whole-below), and at the bound itself, in hybrid groups: d2's smallest tensors have 128 elements, kept whole
# under 129, not 128 (the reference's own bound, a < not a <=)
if MPIRUN="$MPIRUN" python3 labs/check.py --strategy fsdp --ranks 2 --build "$BUILD" --work "$tmp/check_new" \
       --args "--dropout 0.1 --ema 0.9 --unit-blocks 2 --shard-min-numel 1000 --grad-accum 2" >"$tmp/out" 2>&1 &&
   grep -q "check: 7 of 7 checks pass" "$tmp/out" &&
   MPIRUN="$MPIRUN" python3 labs/check.py --strategy fsdp --ranks 4 --build "$BUILD" --work "$tmp/check_bound" \
       --args "--shard-min-numel 128 --shard-group 2 --grad-accum 2" >"$tmp/out" 2>&1 &&
   grep -q "check: 7 of 7 checks pass" "$tmp/out"
then ok "check.py: fsdp with --dropout, --ema, --unit-blocks, --shard-min-numel and --grad-accum passes every check"
else bad "check.py: fsdp with --dropout, --ema, --unit-blocks, --shard-min-numel and --grad-accum passes every check"; cat "$tmp/out"; fi
# --accum-mode, which train_single takes too and the reference fixes where the strategy does (DDP, ZeRO-1: once):
# given once: as the registry's reference fixes it (DDP's sync-each is its no-sync) or as the run gives it
accum_ok=1
for case in "ddp sync-each" "zero2 no-sync" "fsdp sync-each"; do
    set -- $case
    MPIRUN="$MPIRUN" python3 labs/check.py --strategy $1 --ranks 2 --build "$BUILD" --work "$tmp/check_accum" \
        --args "--grad-accum 2 --accum-mode $2" >"$tmp/out" 2>&1 && grep -qE "check: ([0-9]) of \1 checks pass" "$tmp/out" ||
        { accum_ok=0; echo "$case:"; tail -3 "$tmp/out"; }
done
if [ $accum_ok = 1 ]; then ok "check.py: --grad-accum 2 with an --accum-mode passes every check (ddp, zero2, fsdp)"
else bad "check.py: --grad-accum 2 with an --accum-mode passes every check (ddp, zero2, fsdp)"; fi
# the EMA of the small tensors kept whole swaps with the rest: --out-model-ema bit for bit its reference's
ema_run=(--config d2 --vocab 256 --data "$tmp/check_fsdp/data" --batch 8 --seq 16 --steps 3 --quiet --ema 0.9)
if $MPIRUN -np 2 "$BUILD/train_fsdp" "${ema_run[@]}" --shard-min-numel 1000 --out-model-ema "$tmp/ema_fsdp.bin" >"$tmp/out" 2>&1 &&
   $MPIRUN -np 1 "$BUILD/train_single" "${ema_run[@]}" --as-ranks 2 --as-whole-below 1000 \
       --out-model-ema "$tmp/ema_single.bin" >>"$tmp/out" 2>&1 && cmp -s "$tmp/ema_fsdp.bin" "$tmp/ema_single.bin"
then ok "fsdp --shard-min-numel with --ema: --out-model-ema is its reference's, bit for bit"
else bad "fsdp --shard-min-numel with --ema: --out-model-ema is its reference's, bit for bit"; tail -5 "$tmp/out"; fi
# hpZ changes where the backward gathers from, not the run: zero3 and fsdp with nodes of 2 at N = 4 pass every check
if MPIRUN="$MPIRUN" python3 labs/check.py --strategy zero3 --ranks 4 --build "$BUILD" --work "$tmp/check_hpz3" \
       --args "--secondary-shard-group 2" >"$tmp/out" 2>&1 && grep -q "check: 7 of 7 checks pass" "$tmp/out" &&
   MPIRUN="$MPIRUN" python3 labs/check.py --strategy fsdp --ranks 4 --build "$BUILD" --work "$tmp/check_hpzf" \
       --args "--secondary-shard-group 2" >"$tmp/out" 2>&1 && grep -q "check: 7 of 7 checks pass" "$tmp/out"
then ok "check.py: zero3 and fsdp with --secondary-shard-group 2 at N = 4 pass every check"
else bad "check.py: zero3 and fsdp with --secondary-shard-group 2 at N = 4 pass every check"; cat "$tmp/out"; fi
fails "check.py: a node of all the ranks" "--args: --secondary-shard-group 2: give a number of ranks that divides the 2 ranks that shard \(--ranks 2\), fewer than them" \
    python3 labs/check.py --strategy fsdp --ranks 2 --args "--secondary-shard-group 2"
fails "check.py: a node of all of a --shard-group" "--secondary-shard-group 2: give a number of ranks that divides the 2 ranks that shard \(--ranks 4, --shard-group 2\)" \
    python3 labs/check.py --strategy fsdp --ranks 4 --args "--shard-group 2 --secondary-shard-group 2"
fails "check.py: hpZ for a strategy without it" "--args: --secondary-shard-group: ddp does not take it" \
    python3 labs/check.py --strategy ddp --ranks 2 --args "--secondary-shard-group 1"
fails "check.py: a dropout rate outside [0, 0.99]" "--args: --dropout 1.5: give a number in \[0, 0.99\]" \
    python3 labs/check.py --strategy fsdp --ranks 2 --args "--dropout 1.5"
mkdir -p "$tmp/labtree" && cp -r labs ddp zero3 fsdp "$tmp/labtree/" && rm -rf "$tmp/labtree/labs/work"
if python3 "$tmp/labtree/labs/lab.py" start fsdp >"$tmp/out" 2>&1 && grep -q "make lab-grade LAB=fsdp" "$tmp/out" &&
   grep -q 'fatal("lab fsdp: start_gather is not written yet' "$tmp/labtree/labs/work/fsdp/fsdp.c" &&
   grep -q "TODO(lab fsdp): open the unit's all-gather" "$tmp/labtree/labs/work/fsdp/fsdp.c" &&
   ! grep -q "wire_all_gather_start(&s->wire" "$tmp/labtree/labs/work/fsdp/fsdp.c"
then ok "lab-start: the working copy has the lab's functions emptied to a TODO"
else bad "lab-start: the working copy has the lab's functions emptied to a TODO"; cat "$tmp/out"; fi
cp "$tmp/labtree/labs/work/fsdp/fsdp.c" "$tmp/fsdp_before.c"
if python3 "$tmp/labtree/labs/lab.py" start fsdp >"$tmp/out" 2>&1 && grep -q "exists: your work is kept" "$tmp/out" &&
   cmp -s "$tmp/labtree/labs/work/fsdp/fsdp.c" "$tmp/fsdp_before.c"
then ok "lab-start again: the working copy is kept, said, and the command succeeds"
else bad "lab-start again: the working copy is kept, said, and the command succeeds"; cat "$tmp/out"; fi
# a hung run whose processes outlive SIGTERM (a rank that ignores it, as a stuck one may): the grader kills its
# whole session past the timeout, mpirun or not, and returns
marker="shardlab_hang_$$"
if timeout 60 python3 -c "import sys; sys.path.insert(0, 'labs'); import check
r = check.run(['bash', '-c', 'trap \"\" TERM; (exec -a $marker sleep 300) & wait'], '$tmp/hang.log', seconds=2)
sys.exit(0 if r.returncode is None else 1)" && sleep 0.5 && ! pgrep -f "$marker" >/dev/null
then ok "check.py: a run that ignores SIGTERM is killed with its session past the timeout"
else bad "check.py: a run that ignores SIGTERM is killed with its session past the timeout"; fi
pkill -9 -f "$marker" 2>/dev/null || true

finish
