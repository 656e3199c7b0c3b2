#!/usr/bin/env bash
# The communication layer under mpirun (every engine mode, misuse), llmc_check against an independent
# PyTorch GPT-2, and the smallest shapes every strategy must survive.
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/comm.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
echo "== communication layer under mpirun"
for n in 1 2 3 4; do run "test_comm -np $n" $MPIRUN -np $n "$BUILD/tests/test_comm"; done
run "test_comm without mpirun" "$BUILD/tests/test_comm"
run "test_comm -np 3, collectives on the calling thread" env SHARDLAB_COMM_ENGINE=inline $MPIRUN -np 3 "$BUILD/tests/test_comm"
run "test_comm -np 2, the engine waiting in MPI_Wait" env SHARDLAB_COMM_ENGINE=spin $MPIRUN -np 2 "$BUILD/tests/test_comm"
run "test_comm -np 3, MPI's own reductions" env SHARDLAB_COMM_REDUCE=mpi $MPIRUN -np 3 "$BUILD/tests/test_comm"
fails "an unknown SHARDLAB_COMM_REDUCE" "SHARDLAB_COMM_REDUCE is 'fast': give node or mpi" \
    env SHARDLAB_COMM_REDUCE=fast "$BUILD/tests/test_comm"
fails "an unknown SHARDLAB_COMM_ENGINE" "SHARDLAB_COMM_ENGINE is 'stream': give thread, spin or inline" \
    env SHARDLAB_COMM_ENGINE=stream "$BUILD/tests/test_comm"
fails "counts that differ across ranks" "counts differ across ranks" $MPIRUN -np 3 "$BUILD/tests/comm_misuse" counts
fails "a null buffer" "null buffer" $MPIRUN -np 3 "$BUILD/tests/comm_misuse" null
fails "an unknown root" "root outside" $MPIRUN -np 2 "$BUILD/tests/comm_misuse" root
fails "reduce_scatter count not divisible" "not divisible by the 4 ranks" $MPIRUN -np 4 "$BUILD/tests/comm_misuse" divisible
fails "a sum of int8 codes" "cannot be summed" $MPIRUN -np 2 "$BUILD/tests/comm_misuse" int8-sum
fails "a group that runs past the world" "comm_split: rank [0-2] is not in the group 0 \+ 1 k, k < 4, of 3 ranks" \
    $MPIRUN -np 3 "$BUILD/tests/comm_misuse" split-past-world
fails "a rank exits mid-run" "rank 1 stops on purpose" $MPIRUN -np 3 "$BUILD/tests/comm_misuse" rank-exit
fails "a rank exits with a collective in flight" "rank 1 stops on purpose, its all-reduce in flight" \
    $MPIRUN -np 3 "$BUILD/tests/comm_misuse" rank-exit-in-flight

echo "== llmc_check against an independent PyTorch GPT-2"
for ref in tests/data/torch_*; do
    run "llmc_check $(basename "$ref")" "$BUILD/llmc_check" "$ref/model.bin" "$ref/state.bin"
done
# flip one gradient value (dqkvw's first element) and expect a failure
ref=tests/data/torch_nh3_c48_v101
cp "$ref/state.bin" "$tmp/wrong.bin"
python3 - "$tmp/wrong.bin" <<'PY'
import struct, sys
# header 1024 + x, y (2*2*8 int32) + logits (2*8*101 fp32) + loss + wte + wpe + ln1w + ln1b (2 layers)
offset = 1024 + 2 * 16 * 4 + 16 * 101 * 4 + 4 + (128 * 48 + 16 * 48 + 2 * 2 * 48) * 4
with open(sys.argv[1], "r+b") as f:
    f.seek(offset); v, = struct.unpack("<f", f.read(4)); f.seek(offset); f.write(struct.pack("<f", v + 0.01))
PY
if "$BUILD/llmc_check" "$ref/model.bin" "$tmp/wrong.bin" >"$tmp/out" 2>&1; then bad "llmc_check catches a wrong gradient"
elif grep -q "dqkvw .*FAIL" "$tmp/out" && [ "$(grep -c FAIL "$tmp/out")" -eq 2 ]; then ok "llmc_check catches a wrong gradient (dqkvw)"
else bad "llmc_check catches a wrong gradient: wrong report"; cat "$tmp/out"; fi

# B x NH = 1: the attention backward's scratch is then one T x T matrix, exactly what the CPU uses
"$BUILD/init_model" --layers 1 --heads 1 --channels 4 --vocab 5 --max-seq 2 --out "$tmp/one_head.bin" > /dev/null
mkdir -p "$tmp/ids5"
python3 - "$tmp/ids5/train.bin" <<'PY'
import struct, sys
ids = [(i * 3) % 5 for i in range(200)]
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))
PY
run "train_single: one row of one head" "$BUILD/train_single" --model "$tmp/one_head.bin" --data "$tmp/ids5" \
    --batch 1 --seq 2 --steps 2 --quiet
run "train_fsdp -np 2: one row of one head per rank" $MPIRUN -np 2 "$BUILD/train_fsdp" --model "$tmp/one_head.bin" \
    --data "$tmp/ids5" --batch 2 --seq 2 --steps 2 --quiet
# P = 772: ZeRO's flat ranges (193 elements at N = 4, 258 at N = 3) cut rows of 16 anywhere
run "train_ddp --zero-stage 2 -np 4: ranges that cut rows, saved" $MPIRUN -np 4 "$BUILD/train_ddp" --zero-stage 2 \
    --model "$tmp/one_head.bin" --data "$tmp/ids5" --batch 4 --seq 2 --steps 2 --quiet --ckpt-dir "$tmp/one_head_ck"
run "train_ddp --zero-stage 1 -np 3: resumes them" $MPIRUN -np 3 "$BUILD/train_ddp" --zero-stage 1 \
    --model "$tmp/one_head.bin" --data "$tmp/ids5" --batch 3 --seq 2 --steps 4 --quiet --resume "$tmp/one_head_ck"

finish
