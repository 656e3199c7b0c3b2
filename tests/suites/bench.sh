#!/usr/bin/env bash
# bench_step's per-op table accounts for the step it timed (timing: run alone, not beside other parts);
# the element-wise loops vectorised for this machine and for AVX2 (make vec-check).
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/bench.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
if make -s vec-check > "$tmp/vec" 2>&1; then ok "make vec-check: $(tail -n 1 "$tmp/vec")"
else bad "make vec-check"; cat "$tmp/vec"; fi
echo "== bench_step: the per-op table accounts for the step it timed"
# Plausibility, not speed: every op kind has a row with time in each pass it
# runs in, the rows add up to the step, and what no row timed ("other") is small.
# With --fused-classifier the softmax's whole pass (its gradient too) is in the forward.
for fused in "" --fused-classifier; do
if timeout 120 "$BUILD/bench_step" --config d2 --batch 2 --seq 32 --steps 2 $fused >"$tmp/bench" 2>&1 &&
   python3 - "$tmp/bench" "$fused" <<'PY'
import re, sys
text, fused = open(sys.argv[1]).read(), sys.argv[2] == "--fused-classifier"
assert ("fused classifier" in text.splitlines()[0]) == fused, "the first line does not say how the classifier ran"
ops = ["encoder", "layernorm", "matmul qkv", "attention", "matmul attproj", "residual", "matmul fc", "gelu",
       "matmul fcproj", "matmul lm head", "softmax + xent"]
rows = {}
for line in text.splitlines():
    m = re.match(r"  (\S.*?)\s+(-|[\d.]+)\s+(-|[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)%$", line)
    if m:
        assert m[1] not in rows, f"row '{m[1]}' twice"
        rows[m[1]] = [None if v == "-" else float(v) for v in m.groups()[1:]]
missing = [name for name in ops + ["adamw", "zero grads", "other", "step"] if name not in rows]
assert not missing, f"rows missing: {missing}"
step = rows["step"][2]
assert abs(step - float(re.search(r"step ([\d.]+) ms", text)[1])) < 0.051, "the table's step is not the step timed"
eps = 0.002 * (len(ops) + 4)  # each printed value is rounded to 0.001 ms
for name in ops:
    forward, backward, total, _ = rows[name]
    assert forward > 0, f"{name}: no forward time"
    no_backward = name == "residual" or (fused and name == "softmax + xent")
    assert (backward == 0) if no_backward else (backward > 0), f"{name}: backward time {backward}"
    assert abs(forward + backward - total) < 0.002, f"{name}: forward + backward != total"
assert abs(sum(rows[n][0] for n in ops) - rows["step"][0]) < eps, "forward column does not add up"
assert abs(sum(rows[n][1] for n in ops) - rows["step"][1]) < eps, "backward column does not add up"
parts = ops + ["adamw", "zero grads", "other"]
assert abs(sum(rows[n][2] for n in parts) - step) < eps, "the rows do not add up to the step"
other = rows["other"][2]
assert -eps < other < 0.1 * step, f"other is {other} ms of a {step} ms step"
PY
then ok "bench_step${fused:+ $fused}: per-op rows for every op kind, adding up to the step"
else bad "bench_step${fused:+ $fused}: per-op rows for every op kind, adding up to the step"; cat "$tmp/bench"; fi
done
# --precision bf16: a bf16 run's step (its products on bf16 operands) against the bf16 products' own rate
# and the engine that multiplied them, with each product's entry; under AVX2 (no bf16 kernel) the operands widened
# to fp32 on OpenBLAS, the rule's engine for that instruction set (models/products.c)
if timeout 120 "$BUILD/bench_step" --config d2 --batch 2 --seq 32 --steps 1 --precision bf16 >"$tmp/bench16" 2>&1 &&
   head -n 1 "$tmp/bench16" | grep -qE "^d2 B=2 T=32 bf16: .*; bf16 product 1024\^3 .*step/product = " &&
   sed -n 2p "$tmp/bench16" | grep -qE "^products: (oneDNN|OpenBLAS) \(.* kernels; .*\); bf16 operands: (oneDNN [a-z]|widened to fp32)" &&
   sed -n 3p "$tmp/bench16" | grep -qE "^routes: forward out = inp weight\^T: [a-zA-Z0-9 ,]+; backward dinp = dout weight: [a-zA-Z0-9 ,]+; dweight \+= dout\^T inp: " &&
   env ONEDNN_MAX_CPU_ISA=AVX2 timeout 120 "$BUILD/bench_step" --config d2 --batch 2 --seq 32 --steps 1 --precision bf16 >"$tmp/bench16" 2>&1 &&
   sed -n 2p "$tmp/bench16" | grep -qE "^products: OpenBLAS .*bf16 operands: widened to fp32, then OpenBLAS$" &&
   sed -n 3p "$tmp/bench16" | grep -qE "^routes: forward out = inp weight\^T: widened, OpenBLAS sgemm; backward dinp = dout weight: widened, OpenBLAS sgemm; dweight \+= dout\^T inp: widened, OpenBLAS sgemm$"; then
    ok "bench_step --precision bf16: the step of a bf16 run against the bf16 products' rate, their engine and entries named"
else bad "bench_step --precision bf16: the step of a bf16 run against the bf16 products' rate, their engine and entries named"; cat "$tmp/bench16"; fi
fails "bench_step --precision fp16 is refused" "--precision" "$BUILD/bench_step" --precision fp16

finish
