#!/usr/bin/env bash
# Command-line checks: bad inputs fail clearly, once, naming the flag or file; every tool answers --help.
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/cli.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
echo "== command-line errors"
printf 'hello world, hello shardlab. ' > "$tmp/small.txt"
for i in $(seq 6); do cat "$tmp/small.txt" "$tmp/small.txt" > "$tmp/s2" && mv "$tmp/s2" "$tmp/small.txt"; done
run "prepare byte" "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --out "$tmp/byte"
run "prepare into a directory whose parents do not exist yet" "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte \
    --out "$tmp/new/nested"
run "prepare gpt2" "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer gpt2 --vocab models/gpt2_vocab --out "$tmp/gpt2"
if [ "$(echo -n 'Hello world' | "$BUILD/tokenize" --tokenizer gpt2 --vocab models/gpt2_vocab)" = "15496 995" ]; then
    ok "tokenize prints ids"; else bad "tokenize prints ids"; fi
fails "prepare: unreadable text" "/nonexistent.txt: cannot open" "$BUILD/prepare" --text /nonexistent.txt --tokenizer byte --out "$tmp/x"
cp "$tmp/small.txt" "$tmp/text_in_out.txt" && mkdir -p "$tmp/tio" && ln -f "$tmp/text_in_out.txt" "$tmp/tio/train.bin"
fails "prepare: a --text that is one of --out's files is refused" \
    "--text $tmp/tio/train.bin: that is $tmp/tio/train.bin, which --out $tmp/tio writes" \
    "$BUILD/prepare" --text "$tmp/tio/train.bin" --tokenizer byte --out "$tmp/tio"
if cmp -s "$tmp/small.txt" "$tmp/tio/train.bin"; then ok "prepare: the refused text is as it was"
else bad "prepare: the refused text is as it was"; fi
fails "prepare: unknown tokenizer" "unknown tokenizer 'bpe'" "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer bpe --out "$tmp/x"
fails "tokenize: bad vocab dir" "/nonexistent/encoder.json" "$BUILD/tokenize" --tokenizer gpt2 --vocab /nonexistent
train=("$BUILD/train_single" --config d2 --vocab 256 --data "$tmp/byte" --batch 2 --seq 16 --steps 2 --quiet)
run "train_single on prepared data" "${train[@]}"
fails "trainer: unknown flag" "unknown flag '--bogus'" "${train[@]}" --bogus 1
fails "trainer: one rank of two with an unknown flag (no hang)" "unknown flag '--bogus'" \
    $MPIRUN -np 1 "$BUILD/train_ddp" "${train[@]:1}" : -np 1 "$BUILD/train_ddp" "${train[@]:1}" --bogus
"${train[@]}" --ckpt-dir "$tmp/ck_taken" --save-every 1
fails "trainer: a new run into another run's --ckpt-dir" "already holds another run's checkpoints" \
    "${train[@]}" --ckpt-dir "$tmp/ck_taken" --save-every 1
if [ -f "$tmp/ck_taken/step_00000002/manifest.txt" ]; then ok "the other run's checkpoints are untouched"
else bad "the other run's checkpoints are untouched"; fi
# pruning removes only what a save made: not a link's target, not a directory without a manifest
mkdir -p "$tmp/precious" "$tmp/ck_links/step_00000098"
echo kept > "$tmp/precious/thesis.tex"
echo kept > "$tmp/ck_links/step_00000098/notes.txt"
ln -s "$tmp/precious" "$tmp/ck_links/step_00000099"
"${train[@]}" --ckpt-dir "$tmp/ck_links" --save-every 1 --keep 1
if [ -f "$tmp/precious/thesis.tex" ] && [ -f "$tmp/ck_links/step_00000098/notes.txt" ] &&
   [ -f "$tmp/ck_links/step_00000002/manifest.txt" ] && [ ! -e "$tmp/ck_links/step_00000001" ]; then
    ok "--keep prunes only checkpoints: a link's target and other directories stay"
else bad "--keep prunes only checkpoints: a link's target and other directories stay"; fi
mkfifo "$tmp/fifo_out"
fails "trainer: --out-model is a FIFO (no hang)" "--out-model $tmp/fifo_out: not a regular file \(a FIFO\)" \
    "${train[@]}" --out-model "$tmp/fifo_out"
# OpenBLAS's OpenMP build or a refusal naming the package; the summary names the products' engine the rule
# chose for the instruction set (ONEDNN_MAX_CPU_ISA caps it: AVX2 takes OpenBLAS), or SHARDLAB_PRODUCTS
fails "make: another OpenBLAS than the OpenMP build is refused" "OpenMP build is not installed.*libopenblas-openmp-dev" \
    make --no-print-directory blas-check OPENBLAS_LIBDIR=/usr/lib/x86_64-linux-gnu/openblas-pthread
fails "make: without oneDNN's header, the build stops naming the package" "oneDNN, the products' engine, is not installed.*libdnnl-dev" \
    make --no-print-directory blas-check CC="gcc -nostdinc"
if "${train[@]}" --log "$tmp/blas.jsonl" >/dev/null 2>&1 &&
   env ONEDNN_MAX_CPU_ISA=AVX2 "${train[@]}" --log "$tmp/avx2.jsonl" >/dev/null 2>&1 &&
   env ONEDNN_MAX_CPU_ISA=AVX2 SHARDLAB_PRODUCTS=onednn "${train[@]}" --log "$tmp/forced.jsonl" >/dev/null 2>&1 &&
   python3 - "$tmp/blas.jsonl" "$tmp/avx2.jsonl" "$tmp/forced.jsonl" <<'PY'
import json, sys
own, avx2, forced = (json.loads(open(path).read().splitlines()[-1])["products"] for path in sys.argv[1:])
assert own["engine"] in ("oneDNN", "OpenBLAS") and own["parallel"] == "openmp" and own["threads"] >= 1, own
assert own["chosen_by"] == "the rule for this instruction set" and own["isa"] and own["kernels"], own
if own["isa"] not in ("sse41", "avx"):
    assert avx2["isa"] == "avx2" and avx2["engine"] == "OpenBLAS", avx2
    assert avx2["bf16_kernels"] == "widened to fp32, then OpenBLAS", avx2
    assert forced == dict(avx2, engine="oneDNN", kernels="avx2", chosen_by="SHARDLAB_PRODUCTS",
                          bf16_kernels="widened to fp32, then oneDNN"), forced
PY
then ok "trainer: the summary names the products' engine, what chose it, its kernels, bf16's, and the threads"
else bad "trainer: the summary names the products' engine, what chose it, its kernels, bf16's, and the threads"; fi
fails "trainer: a products' engine that does not exist is refused by name" "SHARDLAB_PRODUCTS=blas: the products' engine is onednn or openblas" \
    env SHARDLAB_PRODUCTS=blas "${train[@]}"
fails "trainer: an instruction set oneDNN does not know is refused by name" "ONEDNN_MAX_CPU_ISA=avx3: not an instruction set oneDNN knows" \
    env ONEDNN_MAX_CPU_ISA=avx3 "${train[@]}"
fails "trainer: OMP_NUM_THREADS far past the cores is refused, not a crash" "OMP_NUM_THREADS=100000: more than 16 threads a core" \
    env OMP_NUM_THREADS=100000 "${train[@]}"
fails "trainer: --log is a FIFO (no hang)" "--log $tmp/fifo_out: not a regular file \(a FIFO\)" "${train[@]}" --log "$tmp/fifo_out"
fails "init_model: --out is a FIFO (no hang)" "fifo_out: not a regular file \(a FIFO\)" "$BUILD/init_model" --layers 1 \
    --heads 1 --channels 4 --vocab 5 --max-seq 2 --out "$tmp/fifo_out"
# a model file is written to FILE.tmp and renamed over FILE once whole: with FILE.tmp
# unusable (a directory here), the write fails and the old FILE is untouched
"$BUILD/init_model" --layers 1 --heads 1 --channels 4 --vocab 5 --max-seq 2 --out "$tmp/replaced.bin" > /dev/null
cp "$tmp/replaced.bin" "$tmp/replaced_before.bin"
mkdir "$tmp/replaced.bin.tmp"
fails "init_model: the new file cannot be written" "replaced.bin.tmp: cannot open for writing" "$BUILD/init_model" \
    --layers 2 --heads 1 --channels 4 --vocab 5 --max-seq 2 --out "$tmp/replaced.bin"
if cmp -s "$tmp/replaced.bin" "$tmp/replaced_before.bin"; then ok "a failed write leaves the old model file whole"
else bad "a failed write leaves the old model file whole"; fi
fails "trainer: bad number" "--steps: 'ten' is not an integer" $(setting --steps ten "${train[@]}")
fails "trainer: unknown preset" "unknown preset 'd7'" "$BUILD/train_single" --config d7 --data "$tmp/byte"
fails "trainer: missing data" "--data /nonexistent: no such directory; make one with build/prepare" \
    "$BUILD/train_single" --config d2 --data /nonexistent
mkdir -p "$tmp/no_shards"
fails "trainer: a data directory without train.bin" "no_shards/train.bin: cannot open" "$BUILD/train_single" --config d2 \
    --vocab 256 --data "$tmp/no_shards"
# a prepared directory records its tokenizer: a --config model takes its vocabulary, another is refused
if [ "$(cat "$tmp/byte/tokenizer.txt")" = "$(printf 'tokenizer byte\nvocab_size 256')" ] &&
   "$BUILD/train_single" --config d2 --data "$tmp/byte" --batch 2 --seq 16 --steps 1 | grep -q "L=2 C=128 NH=2 V=256,"
then ok "trainer: --vocab left out takes the prepared data's V = 256"; else bad "trainer: --vocab left out takes the prepared data's V = 256"; fi
fails "trainer: a --vocab other than the data's" "--vocab 300, but --data $tmp/byte was prepared with the byte tokenizer, V = 256" \
    "$BUILD/train_single" --config d2 --vocab 300 --data "$tmp/byte" --steps 1
fails "trainer: a --model of another vocabulary than the data's" "the --model has V = 101, but --data $tmp/byte was prepared with the byte tokenizer, V = 256" \
    "$BUILD/train_single" --model tests/data/torch_nh3_c48_v101/model.bin --data "$tmp/byte" --steps 1
mkdir -p "$tmp/byte_bare" && cp "$tmp/byte/train.bin" "$tmp/byte_bare/"  # shards without their tokenizer's record
fails "trainer: token id >= V" "not below the vocab size 100" "$BUILD/train_single" --config d2 --vocab 100 --data "$tmp/byte_bare" --steps 1
fails "trainer: sequence too long" "--seq 2000 exceeds" $(setting --seq 2000 "${train[@]}")
# under mpirun an error every rank finds is printed once; ranks that fail
# differently are named (comm/fatal_once.c)
said_once() {  # NAME PATTERN COMMAND...: fails with PATTERN on exactly one line of stderr, and one "shardlab:" line
    local name=$1 pattern=$2
    shift 2
    fails "$name" "$pattern" "$@"
    local lines
    lines=$(grep -c "^shardlab:" "$tmp/err")
    if [ "$lines" -eq 1 ]; then ok "$name: said once"; else bad "$name: said $lines times"; cat "$tmp/err"; fi
}
said_once "trainer -np 3: --grad-accum that does not divide, said once" \
    "^shardlab: --grad-accum 4: each rank's 2 rows \(--batch 6 over 3 ranks\) do not split into 4 micro-batches$" \
    $MPIRUN -np 3 "$BUILD/train_ddp" $(setting --batch 6 "${train[@]:1}") --grad-accum 4
said_once "trainer -np 2: an unknown --config, said once" "^shardlab: --config: unknown preset 'd7'" \
    $MPIRUN -np 2 "$BUILD/train_zero3" $(setting --config d7 "${train[@]:1}")
said_once "trainer -np 2: a missing --resume, said once" "^shardlab: $tmp/nothing: no checkpoint here" \
    $MPIRUN -np 2 "$BUILD/train_fsdp" "${train[@]:1}" --resume "$tmp/nothing"
fails "ranks that fail differently are named" "^shardlab: ranks 1, 2: all_reduce counts differ across ranks \(8..16, 16 here\)$" \
    $MPIRUN -np 3 "$BUILD/tests/comm_misuse" counts
if grep -q "^shardlab: rank 0: all_reduce counts differ across ranks (8..16, 8 here)$" "$tmp/err" &&
   [ "$(grep -c "^shardlab:" "$tmp/err")" -eq 2 ]; then ok "and rank 0's own message once, with its rank"
else bad "and rank 0's own message once, with its rank"; cat "$tmp/err"; fi
fails "a rank that fails alone says so, with its rank" "^shardlab: rank 1: rank 1 stops on purpose$" \
    $MPIRUN -np 3 "$BUILD/tests/comm_misuse" rank-exit
# whole numbers in any notation; fractions refused
run "trainer: --steps 2e0 is 2" $(setting --steps 2e0 "${train[@]}")
fails "trainer: --steps 2.5" "--steps: '2.5' is not an integer" $(setting --steps 2.5 "${train[@]}")
# schedules that never reach their peak
fails "trainer: a cosine that never starts" "--warmup covers every one of the --steps" "${train[@]}" --lr-schedule cosine --warmup 2
"${train[@]}" --warmup 4 > "$tmp/out" 2> "$tmp/err"
if grep -q "warning: --warmup 4 is longer than --steps 2: the learning rate rises to 0.00015 at the last step and never reaches --lr 0.0003" "$tmp/err"
then ok "trainer: a warmup longer than the run is warned about"; else bad "trainer: a warmup longer than the run is warned about"; cat "$tmp/err"; fi
# every output is checked before the first step, naming its flag
fails "trainer: --out-model /dev/null, before step 1" "--out-model /dev/null: not a regular file \(a character device\)" \
    "${train[@]}" --out-model /dev/null --log "$tmp/devnull.jsonl"
if grep -q '"step"' "$tmp/devnull.jsonl" 2>/dev/null; then bad "--out-model /dev/null: no step trained"; else ok "--out-model /dev/null: no step trained"; fi
long="$tmp"
while [ ${#long} -lt 4060 ]; do long="$long/$(printf 'd%.0s' $(seq 200))"; done
mkdir -p "$long"
fails "trainer: a --ckpt-dir too long for its checkpoints, before step 1" "--ckpt-dir .*: too long: the files of a checkpoint under it would have paths of [0-9]+ characters, the system allows 4095" \
    "${train[@]}" --ckpt-dir "$long" --log "$tmp/long.jsonl"
if grep -q '"step"' "$tmp/long.jsonl" 2>/dev/null; then bad "a long --ckpt-dir: no step trained"; else ok "a long --ckpt-dir: no step trained"; fi
fails "trainer: batch not divisible by ranks" "--batch 3 is not divisible by the number of ranks \(2\)" \
    $MPIRUN -np 2 "$BUILD/train_ddp" --config d2 --vocab 256 --data "$tmp/byte" --batch 3 --seq 16 --steps 1
zero3=($MPIRUN -np 2 "$BUILD/train_zero3" --config d2 --vocab 256 --data "$tmp/byte" --batch 2 --seq 16 --steps 1)
if [ "$("${zero3[@]}" 2>&1 | grep -c "zero3: the fullest of 2 ranks owns")" = 1 ] && [ -z "$("${zero3[@]}" --quiet 2>&1)" ]; then
    ok "zero3 reports its balance once, and not with --quiet"; else bad "zero3 reports its balance once, and not with --quiet"; fi
fails "trainer: ranks with different --steps" "ranks disagree on --steps: rank 0 has 3, rank 1 has 6" \
    $MPIRUN -np 1 "$BUILD/train_ddp" $(setting --steps 3 "${train[@]:1}") : -np 1 "$BUILD/train_ddp" $(setting --steps 6 "${train[@]:1}")
fails "trainer: --out-model in a missing directory" "--out-model /nonexistent/x.bin: cannot write: No such file" \
    "${train[@]}" --out-model /nonexistent/x.bin
fails "trainer: --out-model is a directory" "--out-model $tmp: not a regular file \(a directory\)" "${train[@]}" --out-model "$tmp"
# an output never overwrites another of the run's files
cp "$tmp/byte/train.bin" "$tmp/train_before.bin"
cp "$tmp/byte/val.bin" "$tmp/val_before.bin"
fails "trainer: --out-model-ema is --out-model" "--out-model $tmp/same.bin: that is the file of --out-model-ema" \
    "${train[@]}" --ema 0.5 --out-model "$tmp/same.bin" --out-model-ema "$tmp/same.bin"
fails "trainer: --out-model is a data file" "--out-model $tmp/byte/../byte/train.bin: that is the file of --data" \
    "${train[@]}" --out-model "$tmp/byte/../byte/train.bin"
fails "trainer: --out-model-ema under --ckpt-dir" "--out-model-ema $tmp/ckout/latest: it is one of the checkpoints' own" \
    "${train[@]}" --ema 0.5 --ckpt-dir "$tmp/ckout" --out-model-ema "$tmp/ckout/latest"
fails "trainer: --log is a data file" "--log $tmp/byte/val.bin: that is the file of --data $tmp/byte/val.bin" \
    "${train[@]}" --log "$tmp/byte/val.bin"
fails "trainer: --trace's JSON is --out-model" "--out-model $tmp/tr.json: that is the file of --trace $tmp/tr.json" \
    "${train[@]}" --out-model "$tmp/tr.json" --trace "$tmp/tr"
fails "trainer: a flag given twice" "^shardlab: --ema given twice" "${train[@]}" --ema 0.9 --ema 0.5
fails "trainer: a switch given twice" "^shardlab: --recompute given twice" "${train[@]}" --recompute --recompute
fails "plan: a flag given twice" "^shardlab: --ranks given twice" "$BUILD/plan" --config d2 --ranks 2 --ranks 3
# the same file reached through a symbolic link, or a hard link: one file, whatever its names
printf 'my log\n' > "$tmp/L3.jsonl" && ln -sf "$tmp/L3.jsonl" "$tmp/L3l.jsonl" && ln -f "$tmp/L3.jsonl" "$tmp/L3h.jsonl"
fails "trainer: --log through a symbolic link (to --out-model) is refused" "--log $tmp/L3l.jsonl: a symbolic link \(to $tmp/L3.jsonl\)" \
    "${train[@]}" --log "$tmp/L3l.jsonl" --out-model "$tmp/L3.jsonl"
# an output through a link: the early check would write the target and the final rename replace the link
mkdir -p "$tmp/lk" && printf 'old' > "$tmp/lk/target.bin" && ln -sf target.bin "$tmp/lk/out.bin" &&
    ln -sf /proc/self/fd/1 "$tmp/lk/stdout"
fails "trainer: --out-model through a symbolic link is refused" "--out-model $tmp/lk/out.bin: a symbolic link \(to target.bin\)" \
    "${train[@]}" --out-model "$tmp/lk/out.bin"
fails "trainer: --out-model-ema through a symbolic link is refused" "--out-model-ema $tmp/lk/out.bin: a symbolic link" \
    "${train[@]}" --ema 0.5 --out-model-ema "$tmp/lk/out.bin"
ln -sf target.bin "$tmp/lk/out.json"
fails "trainer: --trace's file through a link is refused" "--trace $tmp/lk/out.json: a symbolic link \(to target.bin\)" \
    "${train[@]}" --trace "$tmp/lk/out"
fails "trainer: an output linked to the standard output is refused, the link left" "--out-model $tmp/lk/stdout: a symbolic link \(to /proc/self/fd/1\)" \
    "${train[@]}" --out-model "$tmp/lk/stdout"
if [ -L "$tmp/lk/out.bin" ] && [ -L "$tmp/lk/stdout" ] && [ "$(cat "$tmp/lk/target.bin")" = old ] &&
   [ "$(ls "$tmp/lk" | wc -l)" = 4 ]; then ok "the refused links and their target as they were, nothing beside them"
else bad "the refused links and their target as they were, nothing beside them"; ls -la "$tmp/lk"; fi
# a --ckpt-dir of over 2,000 characters saves, and resumes (the checkpoint's path is said twice in a message)
deep="$tmp"; for i in $(seq 11); do deep="$deep/$(printf 'd%.0s' $(seq 190))"; done; mkdir -p "$deep"
if "${train[@]}" --ckpt-dir "$deep/ck" --save-every 1 >"$tmp/out" 2>&1 &&
   "${train[@]:0:11}" --steps 3 --quiet --ckpt-dir "$deep/ck" --resume "$deep/ck" >"$tmp/out" 2>&1 &&
   [ -d "$deep/ck/step_00000003" ]; then ok "a --ckpt-dir of ${#deep} characters saves and resumes"
else bad "a --ckpt-dir of ${#deep} characters saves and resumes"; head -3 "$tmp/out"; fi
rm -rf "$tmp/$(printf 'd%.0s' $(seq 190))"
# without --resume: a --ckpt-dir holding step_N directories (and no latest) is this run's, and --log a hard link
# of one of their files would be overwritten, then pruned
mkdir -p "$tmp/ckl/step_00000001" && echo manifest > "$tmp/ckl/step_00000001/manifest.txt" &&
    ln -f "$tmp/ckl/step_00000001/manifest.txt" "$tmp/ckl_log.jsonl"
fails "trainer: --log a hard link into --ckpt-dir's checkpoints, without --resume" \
    "--log $tmp/ckl_log.jsonl: that is $tmp/ckl/step_00000001/manifest.txt, a file of the checkpoints of --ckpt-dir" \
    "${train[@]}" --ckpt-dir "$tmp/ckl" --log "$tmp/ckl_log.jsonl"
if [ "$(cat "$tmp/ckl/step_00000001/manifest.txt")" = manifest ]; then ok "the linked checkpoint file as it was"
else bad "the linked checkpoint file as it was"; fi
fails "trainer: --serve with other flags is refused" "--serve DIR is given alone" "${train[@]}" --serve "$tmp/jobs"
fails "trainer: an empty --trace is refused" "--trace '': give a path prefix" "${train[@]}" --trace ""
# --out-model is written to PATH.tmp, then renamed over PATH: PATH.tmp is an output too
printf 'precious' > "$tmp/lk/precious.txt" && ln -sf precious.txt "$tmp/lk/o.bin.tmp"
fails "trainer: --out-model whose PATH.tmp is a symbolic link is refused" \
    "--out-model $tmp/lk/o.bin.tmp: a symbolic link \(to precious.txt\)" "${train[@]}" --out-model "$tmp/lk/o.bin"
fails "trainer: --log at --out-model's PATH.tmp is refused" "that is the file of --log $tmp/lk/m.bin.tmp" \
    "${train[@]}" --log "$tmp/lk/m.bin.tmp" --out-model "$tmp/lk/m.bin"
"$BUILD/init_model" --layers 1 --heads 1 --channels 4 --vocab 256 --max-seq 16 --out "$tmp/lk/start.bin" > /dev/null &&
    cp "$tmp/lk/start.bin" "$tmp/lk/start_before.bin" && ln -f "$tmp/lk/start.bin" "$tmp/lk/next.bin.tmp"
fails "trainer: --out-model whose PATH.tmp is a hard link of --model is refused" \
    "--out-model $tmp/lk/next.bin.tmp: that is the file of --model $tmp/lk/start.bin" \
    "${train[@]:0:1}" --model "$tmp/lk/start.bin" "${train[@]:5}" --out-model "$tmp/lk/next.bin"
if [ "$(cat "$tmp/lk/precious.txt")" = precious ] && [ -L "$tmp/lk/o.bin.tmp" ] && [ ! -e "$tmp/lk/o.bin" ] &&
   cmp -s "$tmp/lk/start.bin" "$tmp/lk/start_before.bin" && [ ! -e "$tmp/lk/m.bin.tmp" ]; then
    ok "the refused PATH.tmp outputs: the link, its target and the model as they were"
else bad "the refused PATH.tmp outputs: the link, its target and the model as they were"; ls -la "$tmp/lk"; fi
rm -f "$tmp/lk/precious.txt" "$tmp/lk/o.bin.tmp" "$tmp/lk/start.bin" "$tmp/lk/start_before.bin" "$tmp/lk/next.bin.tmp"
fails "trainer: --out-model a hard link of --log" "--out-model $tmp/L3h.jsonl: that is the file of --log $tmp/L3.jsonl" \
    "${train[@]}" --log "$tmp/L3.jsonl" --out-model "$tmp/L3h.jsonl"
if [ "$(cat "$tmp/L3.jsonl")" = "my log" ]; then ok "the linked log was left as it was"; else bad "the linked log was left as it was"; fi
if cmp -s "$tmp/byte/train.bin" "$tmp/train_before.bin" && cmp -s "$tmp/byte/val.bin" "$tmp/val_before.bin"; then
    ok "the refused outputs left the data as it was"
else bad "the refused outputs left the data as it was"; fi
fails "trainer: --ema past its edge" "--ema: 0.9999991 is outside \[0, 0.999999\]" "${train[@]}" --ema 0.9999991
if "${train[@]}" --ema 0.999999 >/dev/null 2>&1; then ok "trainer: --ema 0.999999, the maximum its message names, is taken"
else bad "trainer: --ema 0.999999, the maximum its message names, is taken"; fi
fails "trainer: --trace in a missing directory" "--trace /nonexistent/tr: cannot write /nonexistent/tr.json" \
    "${train[@]}" --trace /nonexistent/tr
fails "trainer: --timeline-step past --steps" "--timeline-step is past --steps" "${train[@]}" --timeline-step 3
fails "trainer: --timeline-step with nowhere to keep it" "--timeline-step goes with --log or --trace" "${train[@]}" \
    --timeline-step 1
fails "trainer: --ckpt-dir is a file" "--ckpt-dir $tmp/small.txt: not a directory" "${train[@]}" --ckpt-dir "$tmp/small.txt"
fails "trainer: --ckpt-dir in a missing directory" "--ckpt-dir /nonexistent/ck: cannot create the directory" \
    "${train[@]}" --ckpt-dir /nonexistent/ck
fails "trainer: --log on a full disk" "--log /dev/full: cannot write: No space left on device" "${train[@]}" --log /dev/full
fails "trainer: --keep without --ckpt-dir" "--keep K keeps the newest checkpoints of --ckpt-dir, which is not given" \
    "${train[@]}" --keep 3
fails "trainer: --eval-batches without --eval-every" "--eval-batches K sizes each validation, and --eval-every is 0" \
    "${train[@]}" --eval-batches 2
fails "trainer: --accum-mode with one micro-batch" "--accum-mode says when the micro-batches' gradients are reduced, and --grad-accum is 1" \
    "${train[@]}" --accum-mode no-sync
fails "trainer: a test hook's seconds that are not seconds" "SHARDLAB_TEST_OPTIM_DELAY_S is 'abc': give a number of seconds" \
    env SHARDLAB_TEST_OPTIM_DELAY_S=abc "${train[@]}"
fails "trainer: --log in a missing directory" "--log /nonexistent/log.jsonl: cannot open for writing" \
    "${train[@]}" --log /nonexistent/log.jsonl
fails "trainer: unwritable outputs under mpirun" "--log /dev/full: cannot write" \
    $MPIRUN -np 2 "$BUILD/train_zero3" "${train[@]:1}" --log /dev/full
fails "trainer: unwritable outputs under mpirun, rank 0 of 3" "--out-model /nonexistent/x.bin: cannot write" \
    $MPIRUN -np 3 "$BUILD/train_fsdp" $(setting --batch 3 "${train[@]:1}") --out-model /nonexistent/x.bin
# outputs checked, then a failure before training: nothing is left behind but the empty --ckpt-dir
fails "trainer: outputs checked, then no checkpoint to resume" "no checkpoint here" "${train[@]}" --out-model "$tmp/m.bin" \
    --trace "$tmp/tr" --ckpt-dir "$tmp/ck" --resume "$tmp/nothing"
if [ ! -e "$tmp/m.bin" ] && [ ! -e "$tmp/tr.json" ] && [ ! -e "$tmp/tr.tsv" ] && [ -z "$(ls -A "$tmp/ck")" ]; then
    ok "the output checks leave no files behind"; else bad "the output checks leave no files behind: $(ls -A "$tmp" "$tmp/ck")"; fi
fails "trainer: FSDP's flag on another trainer" "unknown flag '--reshard-after-forward'" "${train[@]}" --reshard-after-forward 0
fails "trainer: the fused attention is the GPU build's" "unknown flag '--fused-attention'" "${train[@]}" \
    --fused-attention
for trainer in train_single train_zero3 train_fsdp; do
    fails "$trainer: the ddp trainer's --zero-stage is unknown" "unknown flag '--zero-stage'" \
        "$BUILD/$trainer" --config d2 --vocab 256 --data "$tmp/byte" --steps 1 --quiet --zero-stage 1
done
fails "train_ddp: --zero-stage 3 points to ZeRO-3's trainers" "--zero-stage 3: ZeRO-3 has trainers of its own: .*build/train_zero3" \
    "$BUILD/train_ddp" --config d2 --vocab 256 --data "$tmp/byte" --steps 1 --quiet --zero-stage 3
for stage in 4 -1 1.5 two; do
    fails "train_ddp: --zero-stage $stage" "--zero-stage: '$stage' is not an integer in \[0, 3\]" \
        "$BUILD/train_ddp" --config d2 --vocab 256 --data "$tmp/byte" --steps 1 --quiet --zero-stage "$stage"
done
head -c 5000 tests/data/torch_nh3_c48_v101/model.bin > "$tmp/truncated.bin"
fails "trainer: truncated model" "truncated.bin: header/size mismatch" "$BUILD/train_single" --model "$tmp/truncated.bin" --data "$tmp/byte"
cp "$tmp/byte/train.bin" "$tmp/notmodel.bin"
fails "trainer: wrong magic" "notmodel.bin: not a GPT-2 checkpoint" "$BUILD/train_single" --model "$tmp/notmodel.bin" --data "$tmp/byte"
python3 - "$tmp" <<'PY'
import struct, sys
# llm.c headers (magic, version, maxT, V, L, NH, C, Vp) with absurd sizes on a 1 KB body
for name, L, C in (("wide.bin", 300000000, 2147483647), ("deep.bin", 16777216, 1)):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", 20240326, 3, 64, 256, L, 1, C, 256, *([0] * 248)) + bytes(1024))
PY
fails "trainer: a header whose sizes overflow an int" "wide.bin: L=300000000 C=2147483647 .* needs 6.641e\+19 GB of parameters: the MLP's 4C rows do not fit a 32-bit int" \
    "$BUILD/train_single" --model "$tmp/wide.bin" --data "$tmp/byte"
fails "trainer: a deep header on a small file, at once" "deep.bin: header/size mismatch: the header's config needs 1677723912 bytes \(1.678 GB\)" \
    "$BUILD/train_single" --model "$tmp/deep.bin" --data "$tmp/byte"
fails "plan: a header whose sizes overflow an int" "needs 6.641e\+19 GB" "$BUILD/plan" --model "$tmp/wide.bin" --ranks 2
mkdir -p "$tmp/dirdata/train.bin" "$tmp/fifodata" "$tmp/dirvocab/encoder.json"
mkfifo "$tmp/fifodata/train.bin" "$tmp/fifo"
fails "trainer: a directory as the data shard" "dirdata/train.bin: not a regular file \(a directory\)" \
    "$BUILD/train_single" --config d2 --vocab 256 --data "$tmp/dirdata"
fails "trainer: a FIFO as the data shard" "fifodata/train.bin: not a regular file \(a FIFO\)" \
    "$BUILD/train_single" --config d2 --vocab 256 --data "$tmp/fifodata"
fails "trainer: a directory as the model" "$tmp: not a regular file \(a directory\)" "$BUILD/train_single" --model "$tmp" --data "$tmp/byte"
fails "trainer: a FIFO as the model" "fifo: not a regular file \(a FIFO\)" "$BUILD/train_single" --model "$tmp/fifo" --data "$tmp/byte"
fails "prepare: a directory as the text" "$tmp: not a regular file \(a directory\)" "$BUILD/prepare" --text "$tmp" --tokenizer byte --out "$tmp/x"
fails "prepare: a FIFO as the text" "fifo: not a regular file \(a FIFO\)" "$BUILD/prepare" --text "$tmp/fifo" --tokenizer byte --out "$tmp/x"
fails "tokenize: a FIFO as the input" "fifo: not a regular file \(a FIFO\)" "$BUILD/tokenize" --tokenizer byte "$tmp/fifo"
fails "tokenize: a directory as the vocab" "encoder.json: not a regular file \(a directory\)" \
    "$BUILD/tokenize" --tokenizer gpt2 --vocab "$tmp/dirvocab"
fails "llmc_check: debug state with the wrong magic" "not a debug state file" "$BUILD/llmc_check" \
    tests/data/torch_nh3_c48_v101/model.bin tests/data/torch_nh3_c48_v101/model.bin

fails "trainer: unknown flag without a value" "unknown flag '--bogus'" "${train[@]}" --bogus
fails "trainer: --lr inf" "--lr: 'inf' is not a finite number" "${train[@]}" --lr inf
fails "trainer: --lr nan" "--lr: 'nan' is not a finite number" "${train[@]}" --lr nan
# a learning rate that blows the weights up: NaN and inf flow through every op (no undefined behaviour under
# UBSan, in make test-asan), and the run stops on the loss
fails "trainer: --lr 1e30 stops on a NaN loss, nothing undefined on the way" "^shardlab: step 2: loss is -?nan; stopping" \
    $(setting --steps 3 "${train[@]}") --lr 1e30
fails "FSDP -np 2: --lr 1e30 with dropout and clipping stops on a NaN loss" "step 2: loss is -?nan; stopping" \
    $MPIRUN -np 2 "$BUILD/train_fsdp" --config d2 --vocab 256 --data "$tmp/byte" --batch 4 --seq 16 --steps 3 --quiet \
    --lr 1e30 --dropout 0.1 --grad-clip 1 --ema 0.9
fails "trainer: --weight-decay inf" "--weight-decay: 'inf' is not a finite number" "${train[@]}" --weight-decay inf
fails "trainer: --weight-decay 1e39 (beyond a float)" "--weight-decay: 1e39 is outside" "${train[@]}" --weight-decay 1e39
fails "trainer: --lr that rounds to 0 in a float" "--lr: 1e-50 is too small for single precision" "${train[@]}" --lr 1e-50
fails "trainer: --lr that rounds to 0 in a double" "--lr: 1e-400 is too small for single precision" "${train[@]}" --lr 1e-400
fails "trainer: negative --lr" "--lr: -1 is outside \[0," "${train[@]}" --lr -1
run "trainer: a tiny but representable --lr" "${train[@]}" --lr 1e-40
fails "trainer: unknown --lr-schedule" "--lr-schedule: give constant or cosine" "${train[@]}" --lr-schedule linear
fails "trainer: --min-lr without the cosine" "--min-lr goes with --lr-schedule cosine" "${train[@]}" --min-lr 1e-5
fails "trainer: --min-lr above --lr" "--min-lr is above --lr" "${train[@]}" --lr-schedule cosine --lr 1e-4 --min-lr 1e-3
fails "trainer: negative --warmup" "--warmup: '-2' is not an integer" "${train[@]}" --warmup -2
fails "trainer: negative --grad-clip" "--grad-clip: -1 is outside" "${train[@]}" --grad-clip -1
fails "trainer: unknown --data-order" "--data-order: give sequential or llmc" "${train[@]}" --data-order random
fails "prepare: unknown flag" "unknown flag '--bogus'" "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --out "$tmp/x" --bogus
fails "prepare: --vocab with the byte tokenizer" "--vocab models/gpt2_vocab goes with --tokenizer gpt2" \
    "$BUILD/prepare" --text "$tmp/small.txt" --tokenizer byte --vocab models/gpt2_vocab --out "$tmp/x"
fails "tokenize: --vocab with the byte tokenizer" "goes with --tokenizer gpt2" "$BUILD/tokenize" --tokenizer byte --vocab models/gpt2_vocab
fails "init_model: --vocab beyond uint16 token ids" "--vocab: '70000' is not an integer in \[1, 65536\]" \
    "$BUILD/init_model" --layers 1 --heads 1 --channels 8 --vocab 70000 --max-seq 8 --out "$tmp/x.bin"
fails "plan: --reshard-after-forward 7" "--reshard-after-forward: '7' is not an integer in \[0, 1\]" \
    "$BUILD/plan" --config d2 --ranks 2 --reshard-after-forward 7
fails "plan: --grad-accum that does not divide the rows" "do not split into 3 micro-batches" \
    "$BUILD/plan" --config d2 --ranks 2 --batch 8 --grad-accum 3
fails "plan: --accum-mode later" "--accum-mode: give sync-each or no-sync" "$BUILD/plan" --config d2 --ranks 2 --accum-mode later
# a flag that one strategy refuses as it runs stops the plan before any of the table is printed
# (FSDP, which slices every tensor, is planned first: its refusal is the one said)
fails "plan: a node of hpZ's that does not divide the ranks" "fsdp: --secondary-shard-group 3 does not divide the 4 ranks" \
    "$BUILD/plan" --config d2 --vocab 256 --ranks 4 --secondary-shard-group 3
if [ ! -s "$tmp/out" ]; then ok "plan: the refusal prints no row before it"
else bad "plan: the refusal prints no row before it: $(head -c 200 "$tmp/out")"; fi
# --dims L,NH,C: a GPT-2 of those sizes, where no file holds the model; planned as a file of those sizes is
fails "plan: --dims of two numbers" "--dims '40,32': give L,NH,C, three positive whole numbers" \
    "$BUILD/plan" --dims 40,32 --ranks 2
fails "plan: --dims past 2^31 is refused, not wrapped" "--dims '4294967297,2,16': give L,NH,C" \
    "$BUILD/plan" --dims 4294967297,2,16 --ranks 2
fails "plan: a flag's value that reads like --help is the value" "-h: cannot open" \
    "$BUILD/plan" --config d2 --ranks 2 --time --tokens-per-s 1000 --calibrate -h
fails "plan: --dims with trailing text" "--dims '4,4,256x': give L,NH,C" "$BUILD/plan" --dims 4,4,256x --ranks 2
fails "plan: --dims whose heads do not divide the channels" "3 heads do not divide 64 channels" \
    "$BUILD/plan" --dims 4,3,64 --ranks 2
fails "plan: --dims with --config" "give exactly one of --config dN, --dims L,NH,C" \
    "$BUILD/plan" --dims 4,4,256 --config d4 --ranks 2
"$BUILD/init_model" --layers 2 --heads 4 --channels 128 --vocab 256 --max-seq 1024 --out "$tmp/dims.bin" > /dev/null
if cmp -s <("$BUILD/plan" --model "$tmp/dims.bin" --ranks 2 --tsv 2>&1) \
          <("$BUILD/plan" --dims 2,4,128 --vocab 256 --ranks 2 --tsv 2>&1); then
    ok "plan: --dims 2,4,128 --vocab 256 plans a model file of those sizes byte for byte"
else bad "plan: --dims 2,4,128 --vocab 256 plans otherwise than a model file of those sizes"; fi
# --params: the ZeRO paper's Figure 1 (P = 7.5e9, N = 64, mixed precision: 120, 31.4, 16.6, 1.9 GB per
# rank), and written out by hand for P = 1e9, N = 4: fp32 (16, 4 + 4 + 8/4, 4 + (4 + 8)/4, 16/4) and bf16
# with fp32 gradients (2 + 4 + 12, 2 + 4 + 12/4, 2 + (4 + 12)/4, 18/4)
if "$BUILD/plan" --params 7500000000 --ranks 64 --precision bf16 > "$tmp/fig1" 2>&1 &&
   "$BUILD/plan" --params 1000000000 --ranks 4 > "$tmp/fp32" 2>&1 &&
   "$BUILD/plan" --params 1000000000 --ranks 4 --precision bf16 --reduce-dtype fp32 > "$tmp/mixed" 2>&1 &&
   python3 - "$tmp/fig1" "$tmp/fp32" "$tmp/mixed" <<'PY'
import sys
def totals(path):
    return {f[0]: float(f[4]) for f in (l.split() for l in open(path)) if len(f) == 5 and f[0] in
            ("ddp", "zero1", "zero2", "zero3", "fsdp")}
fig1, fp32, mixed = totals(sys.argv[1]), totals(sys.argv[2]), totals(sys.argv[3])
assert {k: round(v, 1) for k, v in fig1.items()} == {"ddp": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9, "fsdp": 1.9}, fig1
assert fp32 == {"ddp": 16.0, "zero1": 10.0, "zero2": 7.0, "zero3": 4.0, "fsdp": 4.0}, fp32
assert mixed == {"ddp": 18.0, "zero1": 9.0, "zero2": 6.0, "zero3": 4.5, "fsdp": 4.5}, mixed
PY
then ok "plan --params: the ZeRO paper's Figure 1 in bf16, fp32 and bf16 with fp32 gradients by hand"
else bad "plan --params: the ZeRO paper's Figure 1 in bf16, fp32 and bf16 with fp32 gradients by hand"; cat "$tmp/fig1" "$tmp/fp32" "$tmp/mixed"; fi
fails "plan: --reduce-dtype half" "--reduce-dtype: give fp32 or bf16" "$BUILD/plan" --config d2 --ranks 2 --reduce-dtype half
fails "plan: --timeline of no strategy" "--timeline: 'zero4' is not a strategy" "$BUILD/plan" --config d2 --ranks 2 \
    --timeline zero4
fails "plan: --rank outside the ranks" "--rank 2: the ranks are 0..1" "$BUILD/plan" --config d2 --ranks 2 --timeline fsdp \
    --rank 2
fails "plan: --rank without --timeline" "--rank: it picks the rank of --timeline" "$BUILD/plan" --config d2 --ranks 2 \
    --rank 1
fails "plan: --timeline with --tsv" "--tsv: --timeline prints one strategy's step" "$BUILD/plan" --config d2 --ranks 2 \
    --timeline fsdp --tsv
fails "plan: --strategies with another flag" "--strategies lists the strategies, nothing else" "$BUILD/plan" \
    --strategies --tsv
fails "plan: a flag the registry sets (a preset)" "unknown flag '--zero-stage'" "$BUILD/plan" --config d2 --ranks 2 \
    --zero-stage 1
fails "plan: --timeline with a flag the strategy does not take" "--prefetch: ddp does not take it \\(zero3 and fsdp do\\)" \
    "$BUILD/plan" --config d2 --ranks 2 --timeline ddp --prefetch 2
fails "plan: --grad-clip where it changes nothing" "--grad-clip: it adds the norm's all-reduce, which only --traffic" \
    "$BUILD/plan" --config d2 --ranks 2 --grad-clip 1
# --prefetch past the units: the window is the units of blocks (d2: 2), said by the trainer and the planner
if timeout 60 $MPIRUN -np 2 "$BUILD/train_fsdp" --config d2 --vocab 256 --data "$tmp/byte" --batch 2 --seq 16 --steps 1 \
       --prefetch 9 >"$tmp/out" 2>&1 &&
   grep -q "fsdp: --prefetch 9 reaches past the model's 2 unit(s) of blocks: prefetching 2 unit(s) ahead" "$tmp/out" &&
   "$BUILD/plan" --config d2 --ranks 2 --prefetch 9 | grep -q "^the strategies that gather by unit: 2 unit(s) of blocks, prefetching 2$"
then ok "--prefetch 9 on d2: prefetching 2 units ahead, the trainer's note and the planner's header"
else bad "--prefetch 9 on d2: prefetching 2 units ahead, the trainer's note and the planner's header"; tail -3 "$tmp/out"; fi
# the planner plans shapes, not buffers: a batch of 2^32 tokens is planned in a 2 GB address space, at once
if (ulimit -v 2000000; timeout 30 "$BUILD/plan" --dims 1,1,1 --vocab 1 --ranks 1 --batch 65536 --seq 65536 --tsv) \
   >"$tmp/out" 2>&1 && grep -q "^fsdp" "$tmp/out"; then ok "plan: 2^32 tokens a step planned without allocating them"
else bad "plan: 2^32 tokens a step planned without allocating them"; tail -3 "$tmp/out"; fi
fails "plan: --time without a compute rate" "--time needs --tokens-per-s R above 0: .*\(none given\)" "$BUILD/plan" --config d2 --ranks 4 --time
fails "plan: --time with a rate of 0" "--time needs --tokens-per-s R above 0: .*\(0 given\)" "$BUILD/plan" --config d2 --ranks 4 --time --tokens-per-s 0
fails "plan: --within that is not ALPHA,GBPS" "--within: '5us' is not ALPHA,GBPS" "$BUILD/plan" --config d2 --ranks 4 --time \
    --tokens-per-s 1000 --within 5us
printf 'a text\nof short lines\n# and no table\n' > "$tmp/no_timings.txt"
fails "plan: --calibrate on a file without timings" "no bench_comm timings" "$BUILD/plan" --config d2 --ranks 4 --time \
    --tokens-per-s 1000 --calibrate "$tmp/no_timings.txt"
{ echo "# bench_comm: 2 ranks"; echo "# all_reduce"; printf '%0600d 5\n' 1; } > "$tmp/long_line.txt"
fails "plan: --calibrate with a line past bench_comm's" "--calibrate $tmp/long_line.txt:3: a line longer than 510 characters" \
    "$BUILD/plan" --config d2 --ranks 4 --time --tokens-per-s 1000 --calibrate "$tmp/long_line.txt"
# --data: a directory path whose shards' paths would not fit is refused, not read cut
long_data="$tmp/$(printf 'd%.0s' $(seq 1 4090))"
fails "trainer: a --data path of over 4,085 characters" "--data: a path of [0-9]+ characters; the shards' paths in it must stay under 4,096" \
    "${train[@]:0:6}" "$long_data" "${train[@]:7}"
# a latest whose name is longer than any checkpoint's: malformed, not read cut
mkdir -p "$tmp/long_latest" && printf 'step_%0300d\n' 10 > "$tmp/long_latest/latest"
fails "trainer: a latest of 305 characters" "$tmp/long_latest/latest: malformed" "${train[@]}" --resume "$tmp/long_latest"
# --time: N = 1, 2, 4 (weak scaling), every strategy; one rank moves nothing, so its step is its compute
if "$BUILD/plan" --config d2 --vocab 256 --ranks 4 --batch 16 --seq 64 --time --tokens-per-s 1000 --tsv > "$tmp/time" &&
   python3 - "$tmp/time" <<'PY'
import sys
rows = [l.split("\t") for l in open(sys.argv[1])]
assert [(r[0], int(r[1])) for r in rows] == [(s, n) for n in (1, 2, 4) for s in ("ddp", "zero1", "zero2", "zero3", "fsdp")]
for r in rows:
    compute, comm, exposed, step, tps, offload, sent, across = map(float, r[3:])
    assert offload == 0, r                                  # nothing offloaded: no host link, no CPU AdamW
    assert across == 0 and (sent == 0) == (int(r[1]) == 1), r  # one machine of 8 ranks: nothing crosses
    assert abs(compute - 4 * 64 / 1000) < 1e-9, r          # 4 rows of 64 tokens at 1000 tokens/s
    assert abs(step - (compute + exposed)) < 1e-9 and exposed <= comm + 1e-12, r
    assert (comm == 0) == (int(r[1]) == 1), r
PY
then ok "plan --time: every strategy at N = 1, 2, 4; compute from --tokens-per-s, step = compute + exposed"
else bad "plan --time: every strategy at N = 1, 2, 4; compute from --tokens-per-s, step = compute + exposed"; cat "$tmp/time"; fi
# --time's machine flags, by hand for DDP on d2 (P = 560,640; 4 buckets, one all-reduce each):
# comm = 4 * 2(N-1) alpha + 2(N-1)/N * 4P / beta on the link the ring uses
if python3 - "$BUILD/plan" "$tmp" <<'PY'
import subprocess, sys
plan, tmp = sys.argv[1], sys.argv[2]
base = [plan, "--config", "d2", "--vocab", "256", "--ranks", "4", "--batch", "16", "--seq", "64", "--time",
        "--tokens-per-s", "1000", "--tsv"]
def rows(*flags):
    out = subprocess.run([*base, *flags], capture_output=True, text=True, check=True).stdout
    return {(f[0], int(f[1])): [float(x) for x in f[3:]] for f in (l.split("\t") for l in out.splitlines())}
def ddp_comm(n, alpha, beta):
    return 4 * 2 * (n - 1) * alpha + 2 * (n - 1) / n * 4 * 560640 / beta
r = rows("--within", "1e-6,1")
assert abs(r[("ddp", 2)][1] - ddp_comm(2, 1e-6, 1e9)) < 1e-12 and abs(r[("ddp", 4)][1] - ddp_comm(4, 1e-6, 1e9)) < 1e-12, r
r = rows("--within", "1e-6,1", "--across", "2e-6,0.5", "--ranks-per-node", "2")  # N = 4 spans two machines
assert abs(r[("ddp", 2)][1] - ddp_comm(2, 1e-6, 1e9)) < 1e-12 and abs(r[("ddp", 4)][1] - ddp_comm(4, 2e-6, 0.5e9)) < 1e-12, r
one = r[("ddp", 1)][0]
r = rows("--cores-per-node", "1")                      # 4 ranks on one core each machine: a quarter of the rate each
assert abs(r[("ddp", 2)][0] - 2 * one) < 1e-12 and abs(r[("ddp", 4)][0] - 4 * one) < 1e-12, r
r = rows("--cores-per-node", "1", "--ranks-per-node", "2")
assert abs(r[("ddp", 4)][0] - 2 * one) < 1e-12, r
with open(f"{tmp}/bench_comm.txt", "w") as f:           # what bench_comm prints, for alpha 30 us and 2 GB/s
    for n in (2, 4):
        f.write(f"# bench_comm: {n} ranks, backend mpi\n# all_reduce\n#      bytes      time_us   algbw_GB/s   busbw_GB/s\n")
        for size in (1024 << k for k in range(0, 14, 2)):
            f.write(f"  {size:10d} {1e6 * (2 * (n - 1) * 30e-6 + 2 * (n - 1) / n * size / 2e9):12.3f} 0 0\n")
r = rows("--calibrate", f"{tmp}/bench_comm.txt")
assert abs(r[("ddp", 2)][1] / ddp_comm(2, 30e-6, 2e9) - 1) < 1e-4, r
PY
then ok "plan --time: --within, --across, --ranks-per-node, --cores-per-node and --calibrate, by hand"
else bad "plan --time: --within, --across, --ranks-per-node, --cores-per-node and --calibrate, by hand"; fi
# every flag plan takes changes what it prints, or is refused where it would not
plan_d2=("$BUILD/plan" --config d2 --vocab 256 --ranks 4)
# --time runs the strategies' own code on its clock, so the step's flags change the steps it predicts
"${plan_d2[@]}" --batch 16 --time --tokens-per-s 1000 --tsv > "$tmp/time_base"
"${plan_d2[@]}" --batch 16 --time --tokens-per-s 1000 --tsv --grad-accum 2 > "$tmp/time_accum"
for flag in "--grad-accum 2" "--grad-accum 2 --accum-mode no-sync" "--reshard-after-forward 0" "--recompute" \
            "--reduce-dtype bf16" "--prefetch 0"; do
    against="$tmp/time_base"
    case "$flag" in *no-sync*) against="$tmp/time_accum" ;; esac
    if "${plan_d2[@]}" --batch 16 --time --tokens-per-s 1000 --tsv $flag > "$tmp/time_flag" &&
       ! cmp -s "$tmp/time_flag" "$against"
    then ok "plan --time: $flag changes the predicted steps"
    else bad "plan --time: $flag changes the predicted steps"; fi
done
for flag in "--tokens-per-s 10" "--ranks-per-node 2" "--cores-per-node 2" "--within 1e-6,10" "--across 1e-6,10" \
            "--calibrate $tmp/small.txt"; do
    fails "plan: ${flag%% *} without --time" "${flag%% *}: it sets the step-time model of --time" "${plan_d2[@]}" $flag
done
for flag in "--grad-accum 2" "--recompute" "--batch 8" "--prefetch 2" "--tsv"; do
    fails "plan --params: ${flag%% *} is refused" "${flag%% *}: --params P plans the model states alone" \
        "$BUILD/plan" --params 1000 --ranks 4 $flag
done
fails "plan --layout: --seq is refused" "--seq: --layout draws where each element lives" "${plan_d2[@]}" --layout --seq 8
printf '# bench_comm: 2 ranks\n# all_reduce\n1024 nan\n4096 20\n' > "$tmp/nan_bench.txt"
fails "plan --calibrate: a NaN timing" "--calibrate $tmp/nan_bench.txt:3: 1024 bytes in nan us is not a timing" \
    "${plan_d2[@]}" --time --tokens-per-s 1000 --calibrate "$tmp/nan_bench.txt"
printf '# bench_comm: 2 ranks\n# all_reduce\n1024 10\n4096 inf\n' > "$tmp/inf_bench.txt"
fails "plan --calibrate: an infinite timing" "inf_bench.txt:4: 4096 bytes in inf us is not a timing" \
    "${plan_d2[@]}" --time --tokens-per-s 1000 --calibrate "$tmp/inf_bench.txt"
if "$BUILD/plan" --params 7.5e9 --ranks 64 > "$tmp/p1" && "$BUILD/plan" --params 7500000000 --ranks 64 > "$tmp/p2" &&
   cmp -s "$tmp/p1" "$tmp/p2"; then ok "plan --params 7.5e9 is --params 7500000000"
else bad "plan --params 7.5e9 is --params 7500000000"; fi
fails "plan --params 7.5e-9" "--params: '7.5e-9' is not an integer" "$BUILD/plan" --params 7.5e-9 --ranks 64
fails "plan: --params with --config" "without --config, --dims or --model" "$BUILD/plan" --params 10 --config d2 --ranks 2
fails "plan: --precision fp16" "--precision: give fp32 or bf16" "$BUILD/plan" --params 10 --ranks 2 --precision fp16
if "$BUILD/plan" --config d12 --ranks 8 >"$tmp/out" 2>&1 && grep -q "batch 32 x 64 (1 micro-batch(es) of 4 rows per rank" "$tmp/out"; then
    ok "plan: the default batch (4 per rank) works for any N"; else bad "plan: the default batch works for any N"; cat "$tmp/out"; fi
# The table fits a terminal: its columns are the categories some strategy holds, the others named below it.
widest=$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$tmp/out")
if [ "$widest" -le 132 ] && grep -q "^(ema, host_optim, host_staging: 0 for every strategy)$" "$tmp/out" &&
   ! grep -qE "^ {13}.* ema( |$)" "$tmp/out"; then ok "plan: d12's table is at most 132 columns, the idle categories named below it"
else bad "plan: d12's table is at most 132 columns ($widest), the idle categories named below it"; cat "$tmp/out"; fi
mkdir -p "$tmp/tinyvocab"
printf '{"a": 0, "b": 1}' > "$tmp/tinyvocab/encoder.json"
printf '#version: 0.2\na b\n' > "$tmp/tinyvocab/vocab.bpe"
fails "tokenize: a merge whose symbol encoder.json lacks" "tinyvocab/encoder.json: has no id for the symbol \"ab\"" \
    sh -c "printf ab | '$BUILD/tokenize' --tokenizer gpt2 --vocab '$tmp/tinyvocab'"

"$BUILD/init_model" --layers 1 --heads 2 --channels 8 --vocab 256 --max-seq 8 --out "$tmp/maxt8.bin" > /dev/null
sample=("$BUILD/sample" --model "$tmp/maxt8.bin" --tokens 3)
run "sample: a prompt of maxT tokens" "${sample[@]}" --prompt 12345678
fails "sample: a prompt longer than maxT" "--prompt is 9 tokens, more than the model's maximum sequence length 8" \
    "${sample[@]}" --prompt 123456789
for bad_value in nan inf; do  # one weight not a finite number: refused, naming it, not sampled into noise
    python3 - "$tmp/maxt8.bin" "$tmp/$bad_value.bin" "$bad_value" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<f", data, 1024 + 4 * 7, float(sys.argv[3]))  # wte[7]
open(sys.argv[2], "wb").write(data)
PY
    fails "sample: a model with a $bad_value weight" "$tmp/$bad_value.bin: wte\[7\] is $bad_value: the model holds weights that are not finite" \
        "$BUILD/sample" --model "$tmp/$bad_value.bin" --tokens 3 --prompt 1
    fails "trainer: a model with a $bad_value weight" "$bad_value.bin: wte\[7\] is $bad_value: the model holds weights that are not finite" \
        "$BUILD/train_single" --model "$tmp/$bad_value.bin" --data "$tmp/byte" --batch 2 --seq 8 --steps 1 --quiet
done
fails "sample: an empty prompt" "--prompt is empty" "${sample[@]}" --prompt ""
fails "sample: no prompt" "--model FILE.bin and --prompt TEXT are required" "${sample[@]}"
fails "sample: not a model" "notmodel.bin: not a GPT-2 checkpoint" "$BUILD/sample" --model "$tmp/notmodel.bin" --prompt a
fails "sample: a truncated model" "truncated.bin: header/size mismatch" "$BUILD/sample" --model "$tmp/truncated.bin" --prompt a
fails "sample: a vocab the tokenizer does not have" "its vocabulary has V=101 tokens, the byte tokenizer 256" \
    "$BUILD/sample" --model tests/data/torch_nh3_c48_v101/model.bin --prompt a
fails "sample: negative temperature" "--temperature: -1 is outside" "${sample[@]}" --prompt a --temperature -1
fails "sample: --tokens not a number" "--tokens: 'many' is not an integer" $(setting --tokens many "${sample[@]}") --prompt a
fails "sample: unknown tokenizer" "unknown tokenizer 'words'" "${sample[@]}" --prompt a --tokenizer words
# a byte model samples any byte: the text written is UTF-8 a terminal and a Markdown viewer show, each byte that
# begins no character (and each control character but a newline or tab) as \xNN, whole characters as they are
$(setting --tokens 300 "${sample[@]}") --temperature 5 --seed 3 --prompt "é" > "$tmp/sampled.txt" 2>&1
if python3 -c "import sys; t = open(sys.argv[1], 'rb').read(); t.decode('utf-8'); assert t.startswith('é'.encode()); \
   assert not any(b < 32 and b not in (9, 10) for b in t); assert b'\\\\x' in t" "$tmp/sampled.txt"
then ok "sample: noise written as UTF-8, bytes that begin no character escaped"
else bad "sample: noise written as UTF-8, bytes that begin no character escaped"; head -c 300 "$tmp/sampled.txt"; fi

echo "== every tool answers --help (usage on stdout, exit 0) and refuses unknown flags"
for tool in prepare tokenize init_model plan llmc_check sample bench_step train_single; do
    help_ok "$tool --help" "$BUILD/$tool" --help
    help_ok "$tool -h" "$BUILD/$tool" -h
    fails "$tool: unknown flag" "unknown flag '--bogus'" "$BUILD/$tool" --bogus
    fails "$tool: unknown flag with a value" "unknown flag '--bogus'" "$BUILD/$tool" --bogus 1
done
help_ok "report.py --help" python3 examples/report.py --help
fails "report.py: unknown flag" "unknown flag '--bogus'" python3 examples/report.py "$tmp" --bogus
fails "report.py: --build without a value" "--build needs a value" python3 examples/report.py "$tmp" --build
help_ok "plot_timeline.py --help" python3 examples/plot_timeline.py --help
fails "plot_timeline.py: a NAME gnuplot would misread" "NAME .*: letters, digits" python3 examples/plot_timeline.py \
    "$tmp" "x'; system('touch $tmp/pwned'); print '" --panel fsdp:0 -- --config d2 --ranks 2
fails "plot_timeline.py: unknown flag" "unknown flag '--bogus'" python3 examples/plot_timeline.py "$tmp" x --bogus \
    --panel fsdp:0 -- --config d2 --ranks 2
fails "plot_timeline.py: a panel of no strategy" "--panel zero4:0: give STRATEGY:RANK" python3 examples/plot_timeline.py \
    "$tmp" x --panel zero4:0 -- --config d2 --ranks 2
fails "plot_timeline.py: a rank outside the ranks" "--rank 2: the ranks are 0..1" python3 examples/plot_timeline.py \
    "$tmp" x --build "$BUILD" --panel fsdp:2 -- --config d2 --vocab 256 --ranks 2
if python3 examples/plot_timeline.py "$tmp/planned" steps --build "$BUILD" --panel zero3:1 --panel fsdp:0 -- \
       --config d2 --vocab 256 --ranks 2 >"$tmp/out" 2>&1 &&
   [ -s "$tmp/planned/steps.png" ] && [ -s "$tmp/planned/steps.svg" ]
then ok "plot_timeline.py draws planned steps of memory"; else bad "plot_timeline.py draws planned steps of memory"; cat "$tmp/out"; fi
help_ok "compare.sh --help" bash examples/compare.sh --help
fails "compare.sh: takes no arguments" "unexpected argument '--bogus'" bash examples/compare.sh --bogus
help_ok "bench_overlap.sh --help" bash examples/bench_overlap.sh --help
fails "bench_overlap.sh: takes no arguments" "unexpected argument '--bogus'" bash examples/bench_overlap.sh --bogus
fails "bench_overlap.sh: STEPS=1" "give at least 2" env STEPS=1 bash examples/bench_overlap.sh
fails "bench_overlap.sh: ROUNDS=0" "ROUNDS=0: give a whole number of rounds" env ROUNDS=0 bash examples/bench_overlap.sh
help_ok "bench_gpu.sh --help" bash examples/bench_gpu.sh --help
fails "bench_gpu.sh: takes no arguments" "unexpected argument '--bogus'" bash examples/bench_gpu.sh --bogus
for tool in train_ddp train_zero3 train_fsdp bench_comm; do
    help_ok "$tool --help under mpirun -np 2 (rank 0 prints, all exit 0)" $MPIRUN -np 2 "$BUILD/$tool" --help
    fails "$tool: unknown flag under mpirun" "unknown flag '--bogus'" $MPIRUN -np 2 "$BUILD/$tool" --bogus
    if [ "$(grep -c "unknown flag" "$tmp/err")" -eq 1 ]; then ok "$tool: the error is printed once"; else bad "$tool: the error is printed once"; cat "$tmp/err"; fi
done
fails "bench_comm: --rounds 0" "--rounds: '0' is not an integer in \\[1, 1000\\]" $MPIRUN -np 1 "$BUILD/bench_comm" --rounds 0
fails "bench_comm: one rank of two with an unknown flag (no hang)" "unknown flag '--bogus'" \
    $MPIRUN -np 1 "$BUILD/bench_comm" --max-mib 1 : -np 1 "$BUILD/bench_comm" --max-mib 1 --bogus
fails "bench_comm: ranks with different --max-mib" "--max-mib differs across ranks" \
    $MPIRUN -np 1 "$BUILD/bench_comm" --max-mib 1 : -np 1 "$BUILD/bench_comm" --max-mib 4
fails "bench_comm: ranks with different --overlap-ms" "--overlap-ms differs across ranks" \
    $MPIRUN -np 1 "$BUILD/bench_comm" --max-mib 1 --overlap-ms 1 : -np 1 "$BUILD/bench_comm" --max-mib 1 --overlap-ms 2
fails "bench_comm: --busy-threads with --overlap-ms" "--busy-threads: the sweep's option" \
    $MPIRUN -np 2 "$BUILD/bench_comm" --max-mib 1 --overlap-ms 1 --busy-threads 1
if [ "$(grep -c "busy-threads" "$tmp/err")" -eq 1 ]; then ok "bench_comm: --busy-threads's error printed once"
else bad "bench_comm: --busy-threads's error printed once"; cat "$tmp/err"; fi
# the sweep with a thread spinning beside it: the thread ran (its CPU time), and the header says so
if timeout 120 $MPIRUN -np 2 "$BUILD/bench_comm" --max-mib 1 --rounds 1 --busy-threads 1 >"$tmp/busy" 2>&1 &&
   head -n 1 "$tmp/busy" | grep -q "threads spinning beside the ranks" &&
   awk '/busy thread\(s\) took/ { found = 1; if ($6 + 0 < 0.1) exit 1 } END { exit !found }' "$tmp/busy"
then ok "bench_comm --busy-threads 1: $(tail -n 1 "$tmp/busy")"
else bad "bench_comm --busy-threads 1: a thread spins beside the sweep"; cat "$tmp/busy"; fi
if $MPIRUN -np 2 "$BUILD/bench_comm" --max-mib 1 --overlap-ms 1 >"$tmp/out" 2>&1 &&
   grep -qE '^ +1048576( +-?[0-9.]+){7}$' "$tmp/out"; then
    ok "bench_comm --overlap-ms: a row for 1 MiB"; else bad "bench_comm --overlap-ms: a row for 1 MiB"; cat "$tmp/out"; fi
fails "plan: --layout for more ranks than a picture holds" "--layout draws up to 4096 ranks" \
    "$BUILD/plan" --config d2 --ranks 5000 --layout


finish
