#!/usr/bin/env bash
# make compare on tiny runs: every plot and the report, and what each plot must show.
# One part of make test (tests/run_tests.sh runs the parts side by side); alone:
#   BUILD=build MPIRUN="mpirun ..." bash tests/suites/compare.sh
# Ends with "N passed, M failed".
cd "$(dirname "$0")/../.."
. tests/testlib.sh
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
shared_inputs  # $tmp/small.txt
echo "== make compare on a tiny run: plots and report"
cmp_env=(env BUILD="$BUILD" MPIRUN="$MPIRUN" RUNS="$tmp/runs" NAME=tiny RANKS=2 CONFIG=d2 STEPS=2 BATCH=2 SEQ=16 TEXT="$tmp/small.txt")
run "compare.sh tiny run" "${cmp_env[@]}" bash examples/compare.sh
missing_plots=0
for plot in loss memory_by_category memory_step peak_memory throughput comm_per_step step_time memory_vs_ranks \
            model_state_vs_ranks sharding scaling zeropp units units_time timeline_ddp timeline_zero1 timeline_zero2 timeline_zero3 \
            timeline_fsdp; do
    for ext in png svg; do [ -s "$tmp/runs/tiny/plots/$plot.$ext" ] || { missing_plots=1; echo "missing or empty: $plot.$ext"; }; done
done
if [ $missing_plots -eq 0 ] && [ -s "$tmp/runs/tiny/report.md" ] && [ -s "$tmp/runs/tiny/report.html" ]; then
    ok "38 plots (PNG and SVG) and the report are written"; else bad "38 plots (PNG and SVG) and the report are written"; fi
# the ZeRO++ plot: each of ZeRO++'s changes sends fewer bytes across machines than the rung below it, at both N
if python3 - "$tmp/runs/tiny" <<'PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(f"{sys.argv[1]}/data/zeropp.tsv") if not line.startswith("#")]
names = [r[0] for r in rows]
assert names == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP", "+ qwZ", "+ hpZ", "+ qgZ"], names
for col in (1, 2):
    fsdp_rungs = [float(r[col]) for r in rows[4:]]
    assert all(b < a for a, b in zip(fsdp_rungs, fsdp_rungs[1:])), (col, fsdp_rungs)
PY
then ok "report: the ZeRO++ plot's rungs each send less across machines than the one below, at N = 64 and 384"
else bad "report: the ZeRO++ plot's rungs each send less across machines than the one below, at N = 64 and 384"; fi
# every picture read as a person reads it (tests/check_plots.py): axes labelled, legend entries with data, tick
# labels apart; memory_by_category's stacks are the ranks' peak moments
run "report: every plot's axes labelled, its legend's entries with data, its tick labels apart; the memory stacks happened" \
    python3 tests/check_plots.py "$tmp/runs/tiny"
engine=$(python3 -c 'import json,sys; p = json.loads(open(sys.argv[1]).read().splitlines()[-1])["products"]; print(p["engine"], p["kernels"], p["isa"])' \
         "$tmp/runs/tiny/single.jsonl" 2>/dev/null)
read -r engine_name engine_kernels engine_isa <<<"$engine"
if [ -n "$engine" ] && grep -qE "^Machine: .*; products on $engine_name \($engine_kernels\), chosen by the rule for $engine_isa \(docs/performance.md\); threads a rank: single [0-9]+, " "$tmp/runs/tiny/report.md"; then
    ok "report: the machine line names the products' engine and each run's threads a rank"
else bad "report: the machine line names the products' engine and each run's threads a rank"; grep "^Machine" "$tmp/runs/tiny/report.md"; fi
run "report.html rendered by headless Chromium, as a person sees it" bash tests/render_report.sh "$tmp/runs/tiny" \
    "$tmp/runs/tiny/rendered.png"
# the units plot: FSDP's 3U - 1 collectives per step for J = 1 .. L (d2: U = 4, 3: U gathers in the forward, U - 1 in
# the backward, whose head is still gathered, U reduce-scatters), its peak growing with the units
if python3 - "$tmp/runs/tiny" <<'PY'
import sys
rows = [line.split("\t") for line in open(f"{sys.argv[1]}/data/units.tsv") if not line.startswith("#")]
assert [int(r[0]) for r in rows] == [1, 2], rows
assert [int(r[4]) for r in rows] == [11, 8], rows  # fsdp_calls
assert float(rows[1][2]) > float(rows[0][2]), rows  # fsdp_peak_mb
PY
then ok "report: the units plot's FSDP collectives are 3U - 1 per step, its peak grows with J"
else bad "report: the units plot's FSDP collectives are 3U - 1 per step, its peak grows with J"; fi
# the link to the planner's page: a file there, and its state the run's plan (the page reads it as build/plan's flags)
if python3 - "$tmp/runs/tiny" "$BUILD" <<'PY'
import json, os, re, subprocess, sys
run, build = sys.argv[1], sys.argv[2]
link = re.search(r"\[the planner's page\]\(([^)#]*)#([^)]*)\)", open(f"{run}/report.md").read())
assert link and os.path.exists(os.path.join(run, link.group(1))), "no link, or no page there"
args = []
for part in link.group(2).split("&"):
    name, _, value = part.partition("=")
    args += [f"--{name}", value] if "=" in part else [f"--{name}"]
if args[:2] == ["--config", ""]:
    args = args[2:]
at = args.index("--tokens-per-s")  # the page's time panels' own flag: train_single's measured rate
rate = args.pop(at + 1)
args.pop(at)
single = json.loads(open(f"{run}/single.jsonl").read().splitlines()[-1])
assert rate == str(round(single["tokens_per_s"])), (rate, single["tokens_per_s"])
summary = json.loads(open(f"{run}/fsdp.jsonl").read().splitlines()[-1])
assert args[args.index("--ranks") + 1] == str(summary["world_size"]), args
plan = subprocess.run([f"{build}/plan", *args, "--tsv"], capture_output=True, text=True)
assert plan.returncode == 0, plan.stderr
fsdp = [line.split("\t") for line in plan.stdout.splitlines() if line.startswith("fsdp\t")]
assert max(int(row[12]) for row in fsdp) == max(r["peak_bytes"] for r in summary["ranks"]), "not the run's plan"
PY
then ok "report: its link opens the planner's page on the run's own plan (FSDP's peak the run's) and rate"
else bad "report: its link opens the planner's page on the run's own plan (FSDP's peak the run's) and rate"; fi
# "Memory over one step": each strategy's panel climbs to its fullest rank's peak and ends at its resident bytes,
# and the report names the peak's moment in words
if python3 - "$tmp/runs/tiny" <<'PY'
import json, sys
run = sys.argv[1]
report = open(f"{run}/report.md").read()
names = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP"}
for s, name in names.items():
    summary = json.loads(open(f"{run}/{s}.jsonl").read().splitlines()[-1])
    rank = max(summary["ranks"], key=lambda r: r["peak_bytes"])
    rows = [[float(x) for x in line.split("\t")] for line in open(f"{run}/data/memory_step_{s}.tsv")
            if not line.startswith("#")]
    top = max(row[-1] for row in rows)
    resident = sum(rank["mem"][c]["current"] for c in rank["mem"]) / 1e6
    assert abs(top - rank["peak_bytes"] / 1e6) < 1e-6, (s, top, rank["peak_bytes"])
    assert abs(rows[-1][-1] - resident) < 1e-6, (s, rows[-1][-1], resident)
    assert f"{name}: peak {rank['peak_bytes'] / 1e6:.1f} MB" in report, (s, "no peak sentence")
PY
then ok "report: each strategy's step of memory reaches its peak, ends at its resident bytes, and the peak is named"
else bad "report: each strategy's step of memory reaches its peak, ends at its resident bytes, and the peak is named"; fi
if grep -q "^## Text sampled from the trained model" "$tmp/runs/tiny/report.md" && [ "$(head -c 4 "$tmp/runs/tiny/sample.txt")" = "The " ] \
    && grep -q "<pre>The " "$tmp/runs/tiny/report.html"; then
    ok "the report ends with text sampled from the trained model"; else bad "the report ends with text sampled from the trained model"; fi
if grep -q '^| zero1 | 2 |' "$tmp/runs/tiny/report.md" && grep -q '^| zero2 | 2 |' "$tmp/runs/tiny/report.md" &&
   grep -q '"strategy": "zero2"' "$tmp/runs/tiny/zero2.jsonl"; then
    ok "compare: ZeRO-1 and ZeRO-2 run by default, under their names"; else bad "compare: ZeRO-1 and ZeRO-2 run by default, under their names"; fi
# the report's "comm waited" column is each run's slowest rank's comm_wait_s over its step time (the Speed table's
# rank and definition)
if python3 - "$tmp/runs/tiny" <<'PY'
import json, sys
run = sys.argv[1]
rows = {l.split("|")[1].strip(): l.split("|")[-2].strip() for l in open(f"{run}/report.md")
        if l.startswith("| ") and len(l.split("|")) == 12}  # the main table's rows, not the Speed table's
for s in ("ddp", "zero3", "fsdp"):
    ranks = json.loads(open(f"{run}/{s}.jsonl").read().splitlines()[-1])["ranks"]
    t = max((r["time"] for r in ranks), key=lambda t: t.get("step_s", 0))
    share = t["comm_wait_s"] / (t["compute_s"] + t["comm_wait_s"] + t["optim_s"])
    assert rows[s] == f"{100 * share:.0f}%", (s, rows[s], share)
    assert any(r["minor_faults"] > 0 for r in ranks), s
PY
then ok "report: comm waited is comm_wait_s over the step, per run; minor faults are counted"
else bad "report: comm waited is comm_wait_s over the step, per run; minor faults are counted"; fi
if grep -q "^## Speed" "$tmp/runs/tiny/report.md" && grep -q "^| fsdp | 2 |" "$tmp/runs/tiny/report.md" &&
   ! grep -q "time-sliced" "$tmp/runs/tiny/report.md" && grep -q "writes mostly noise" "$tmp/runs/tiny/report.md"; then
    ok "report: a Speed section from the runs themselves (no more ranks than cores), and what the sample is"
else bad "report: a Speed section from the runs themselves (no more ranks than cores), and what the sample is"; fi
# more ranks than cores: the numbers are labelled time-sliced, and speed is measured again at one rank per core
cores=$(getconf _NPROCESSORS_ONLN)  # the machine's online cores, as compare.sh and the logs count them
sliced=$(( 2 * cores ))
run "compare.sh with more ranks than cores" "${cmp_env[@]}" NAME=sliced RANKS=$sliced BATCH=$sliced STRATEGIES="ddp fsdp" \
    bash examples/compare.sh
if grep -q "tokens/s (time-sliced)" "$tmp/runs/sliced/report.md" &&
   grep -q "These runs put $sliced ranks on $cores cores" "$tmp/runs/sliced/report.md" &&
   grep -q "^| fsdp | $cores |" "$tmp/runs/sliced/report.md" &&
   [ "$(python3 -c "import json; print(json.loads(open('$tmp/runs/sliced/speed/ddp.jsonl').read().splitlines()[-1])['world_size'])")" = "$cores" ]
then ok "report: time-sliced numbers are labelled so, and speed comes from one rank per core"
else bad "report: time-sliced numbers are labelled so, and speed comes from one rank per core"; grep -E "^- |^\| " "$tmp/runs/sliced/report.md" | head; fi
# ZEROPP=1: FSDP's runs with each of ZeRO++'s changes, measured in the report beside FSDP's own
run "compare.sh ZEROPP=1" "${cmp_env[@]}" NAME=zeropp RANKS=4 BATCH=4 STRATEGIES="fsdp" ZEROPP=1 bash examples/compare.sh
if python3 - "$tmp/runs/zeropp" <<'PY'
import sys
text = open(f"{sys.argv[1]}/report.md").read()
section = text.split("## ZeRO++, measured")[1].split("\n## ")[0]
rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")][1:]
flags = [r[0] for r in rows]
assert flags == ["(FSDP)", "--quantize-weights int8", "--secondary-shard-group 2",
                 "--quantize-grads int4 --quantize-grads-node 2",
                 "--quantize-weights int8 --secondary-shard-group 2 --quantize-grads int4 --quantize-grads-node 2"], flags
fsdp, qwz, hpz, qgz, both = ({"same": r[3], "sent": float(r[4]), "gathered": float(r[5])} for r in rows)
assert hpz["same"] == "yes" and qwz["same"] == qgz["same"] == both["same"] == "no", rows  # hpZ alone: FSDP's run
assert qwz["sent"] < fsdp["sent"] and qgz["sent"] < fsdp["sent"] and both["sent"] < qwz["sent"], rows
assert hpz["gathered"] > fsdp["gathered"], rows  # the secondary shards
PY
then ok "compare ZEROPP=1: the report measures FSDP with each of ZeRO++'s changes (hpZ FSDP's run bit for bit, fewer bytes with the quantizers)"
else bad "compare ZEROPP=1: the report measures FSDP with each of ZeRO++'s changes"; sed -n '/ZeRO++, measured/,/^## [A-Y]/p' "$tmp/runs/zeropp/report.md"; fi
fails "compare: ZEROPP=2" "ZEROPP=2: give 0 or 1" "${cmp_env[@]}" NAME=zeropp2 ZEROPP=2 bash examples/compare.sh
fails "compare: ZEROPP=1 without fsdp" "STRATEGIES must include fsdp" "${cmp_env[@]}" NAME=zeropp3 STRATEGIES="ddp" ZEROPP=1 \
    bash examples/compare.sh
run "compare.sh STRATEGIES=\"zero2 fsdp\"" "${cmp_env[@]}" NAME=subset STRATEGIES="zero2 fsdp" bash examples/compare.sh
if [ -s "$tmp/runs/subset/plots/timeline_zero2.png" ] && [ ! -e "$tmp/runs/subset/ddp.jsonl" ] &&
   [ ! -e "$tmp/runs/subset/plots/timeline_ddp.png" ] && grep -q '^| fsdp | 2 |' "$tmp/runs/subset/report.md" &&
   ! grep -q '^| zero3 ' "$tmp/runs/subset/report.md"; then
    ok "compare: STRATEGIES runs and reports those alone"; else bad "compare: STRATEGIES runs and reports those alone"; fi
# PRECISION=bf16: every run in bf16, train_single once more in fp32, and the report says how far apart; with the
# optimizer offloaded, whose host memory gets a plot of its own, and the classifier fused
run "compare.sh PRECISION=bf16" "${cmp_env[@]}" NAME=bf16 STRATEGIES="ddp fsdp" PRECISION=bf16 \
    ARGS="--offload-optimizer --fused-classifier" bash examples/compare.sh
if grep -q '"precision": "bf16"' "$tmp/runs/bf16/fsdp.jsonl" && grep -q '"precision": "fp32"' "$tmp/runs/bf16/single_fp32.jsonl" &&
   grep -q "In bf16 (gradients reduced in bf16; docs/precision.md) the single-rank loss stays within" "$tmp/runs/bf16/report.md"; then
    ok "compare PRECISION=bf16: bf16 runs, an fp32 twin, and the report's distance between them"
else bad "compare PRECISION=bf16: bf16 runs, an fp32 twin, and the report's distance between them"; fi
run "report PRECISION=bf16: the pictures pass the same reading" python3 tests/check_plots.py "$tmp/runs/bf16"
# the planner's memory line is drawn for the runs' own flags (bf16, offloaded, fused classifier): at the runs' N it meets their peaks
if [ -s "$tmp/runs/bf16/plots/host_memory.png" ] && grep -q "plots/host_memory.png" "$tmp/runs/bf16/report.md" &&
   python3 - "$tmp/runs/bf16/data" <<'PY'
import sys
rows = lambda name: [line.split("\t") for line in open(f"{sys.argv[1]}/{name}").read().splitlines()]
measured = rows("measured_peak.tsv")
planned = [r for r in rows("plan.tsv") if r[0] == measured[1][0]]
assert measured[0] == rows("plan.tsv")[0] and planned == [measured[1]], (planned, measured)
PY
then ok "compare with --offload-optimizer: a host memory plot, and the planner's line through the measured peaks"
else bad "compare with --offload-optimizer: a host memory plot, and the planner's line through the measured peaks"; fi
fails "compare: PRECISION=fp16" "PRECISION=fp16: give fp32 or bf16" "${cmp_env[@]}" NAME=bad PRECISION=fp16 bash examples/compare.sh
fails "compare: an unknown strategy" "STRATEGIES: unknown strategy 'zero4'" "${cmp_env[@]}" NAME=bad STRATEGIES="ddp zero4" \
    bash examples/compare.sh
fails "compare: a strategy twice" "'fsdp' is listed twice" "${cmp_env[@]}" NAME=bad STRATEGIES="fsdp fsdp" bash examples/compare.sh
fails "report: an unknown strategy" "--strategies: unknown strategy 'zero4'" python3 examples/report.py "$tmp/runs/tiny" \
    --build "$BUILD" --strategies ddp,zero4
fails "report: a strategy's log missing" "subset/ddp.jsonl: missing" python3 examples/report.py "$tmp/runs/subset" \
    --build "$BUILD" --strategies ddp,zero2
fails "compare: an existing run is not overwritten" "already exists; not overwriting" "${cmp_env[@]}" bash examples/compare.sh
# the trace's collective lane: the timeline draws it above the rank's compute
cp -r "$tmp/runs/tiny" "$tmp/runs/lane"
# (during the first event of the last step, on rank 1)
awk -F'\t' '!/^#/ && (s == "" || $2 > s) {s = $2; a = $5; b = $6} END {printf "1\t%d\tcollective\tall_reduce 1024\t%s\t%s\n", s, a, b}' \
    "$tmp/runs/lane/ddp.trace.tsv" >> "$tmp/runs/lane/ddp.trace.tsv"
if python3 examples/report.py "$tmp/runs/lane" --build "$BUILD" >"$tmp/out" 2>&1 &&
   grep -qP '^1\t[0-9.e-]+\t[0-9.e-]+\tall_reduce_1024$' "$tmp/runs/lane/data/timeline_ddp_collective.tsv" &&
   [ -s "$tmp/runs/lane/plots/timeline_ddp.svg" ] && grep -q "collectives in flight (above)" "$tmp/runs/lane/plots/timeline_ddp.svg"; then
    ok "report: collectives in a trace get their own lane on the timeline"
else bad "report: collectives in a trace get their own lane on the timeline"; cat "$tmp/out"; fi
cp -r "$tmp/runs/tiny" "$tmp/runs/cut"
head -n 1 "$tmp/runs/tiny/ddp.jsonl" > "$tmp/runs/cut/ddp.jsonl"
fails "report: truncated log" "cut/ddp.jsonl: truncated: no summary line" python3 examples/report.py "$tmp/runs/cut" --build "$BUILD"
head -c 30 "$tmp/runs/tiny/ddp.jsonl" > "$tmp/runs/cut/ddp.jsonl"
fails "report: log cut mid-line" "cut/ddp.jsonl:1: not valid JSON" python3 examples/report.py "$tmp/runs/cut" --build "$BUILD"
rm "$tmp/runs/cut/zero3.jsonl"
cp "$tmp/runs/tiny/ddp.jsonl" "$tmp/runs/cut/ddp.jsonl"
fails "report: missing log" "cut/zero3.jsonl: missing" python3 examples/report.py "$tmp/runs/cut" --build "$BUILD"

finish
