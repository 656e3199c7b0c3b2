# shardlab: `make` builds everything into build/, `make test` runs every test.
# Run `make deps` first on a fresh Debian/Ubuntu machine.

BUILD    ?= build
CC       ?= gcc
OPT      ?= -O2 -march=native
RANKS    ?= 4
PRECISION ?= fp32
PKGS      = ompi-c openblas
# OpenBLAS's OpenMP build: its threads and the layers' loops are one OpenMP pool
# (run/threads.c), found first at run time too (rpath), whichever OpenBLAS
# the system's alternatives point at.
PKG_CONFIG = PKG_CONFIG_PATH=/usr/lib/$(shell $(CC) -print-multiarch)/openblas-openmp/pkgconfig pkg-config
OPENBLAS_LIBDIR = $(shell $(PKG_CONFIG) --variable=libdir openblas 2>/dev/null)
# -fno-math-errno: sqrt and the like set no errno, so they are one instruction and
# the loops that call them vectorise. -fvect-cost-model=dynamic: at -O2, GCC 12
# vectorises only loops that need no run-time check that their arrays do not
# overlap, which left layernorm's, the residual's and the bias adds' loops scalar.
# Every result stays the same: element-wise loops, and sums kept in order.
# make vec-check holds the loops marked "// vectorised" to it.
CODEGEN   = -fno-math-errno -fvect-cost-model=dynamic -fopenmp
CFLAGS   += -std=c11 -I. $(OPT) $(CODEGEN) -Wall -Wextra -D_GNU_SOURCE -MMD -MP \
            $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
# The layers' matrix products run on oneDNN or OpenBLAS, both linked: models/products.c chooses
# one per CPU at run time (SHARDLAB_PRODUCTS=onednn|openblas overrides it; docs/performance.md).
LDLIBS   += -ldnnl $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null) -Wl,-rpath,$(OPENBLAS_LIBDIR) -fopenmp -lm
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
# mpirun as root needs --allow-run-as-root; more ranks than cores need --oversubscribe.
# Several machines: HOSTFILE=hosts spreads the ranks over the hosts it lists, with
# shared memory inside a host and TCP between hosts (MPI_EXTRA="--mca
# btl_tcp_if_include eth0" picks the network interface).
# pml ob1: the point-to-point layer over those btls. Debian's Open MPI would
# otherwise try UCX first, which takes 0.2 s more to start every job here and
# does not use the btls named.
MPIRUN   ?= mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root) \
            --mca pml ob1 \
            --mca btl $(if $(HOSTFILE),self$(comma)vader$(comma)tcp --hostfile $(HOSTFILE),self$(comma)vader) \
            $(MPI_EXTRA) -x OPENBLAS_NUM_THREADS=1

DEB_PACKAGES = build-essential pkg-config openmpi-bin libopenmpi-dev check libsubunit-dev \
               libopenblas-openmp-dev libdnnl-dev gnuplot-nox python3 clang libclang-rt-14-dev procps chromium \
               wasi-libc libclang-rt-14-dev-wasm32 lld llvm

# Sources by folder, from the bottom layer up (docs/README.md has the map): every
# .c of these folders is in the library, and the CUDA build adds every .cu. The
# CPU build, the CUDA build and the dry device's (build/plan: the strategies'
# own code on buffers with no memory behind them, on a simulated network) share
# all of it but the few files each device has alone.
# A strategy is a folder with a plugin.c (kit/strategy.h); each gets a trainer,
# build/train_<folder>, from examples/train.c.
STRATEGY_DIRS = $(patsubst %/plugin.c,%,$(wildcard */plugin.c))
TRAINERS  = $(STRATEGY_DIRS:%=train_%)
LIB_DIRS  = util device comm models kit $(STRATEGY_DIRS) run
CPU_ONLY  = device/device_cpu.c comm/nccl_stub.c models/gpt2_cpu.c
DRY_ONLY  = device/device_dry.c models/gpt2_dry.c plan/dry_run.c
WEB_ONLY  = device/host_memory_wasi.c
CORE_SRCS = $(filter-out $(CPU_ONLY) $(DRY_ONLY) $(WEB_ONLY),$(wildcard $(addsuffix /*.c,$(LIB_DIRS))))
CUDA_SRCS = $(wildcard $(addsuffix /*.cu,$(LIB_DIRS)))
CORE_OBJS = $(CORE_SRCS:%.c=$(BUILD)/obj/%.o)
LIB_OBJS  = $(CORE_OBJS) $(CPU_ONLY:%.c=$(BUILD)/obj/%.o)
# The dry device's library has no MPI in it: build/plan links neither MPI nor BLAS.
MPI_ONLY  = comm/mpi.c comm/node.c comm/fatal_once.c
DRY_OBJS  = $(filter-out $(MPI_ONLY:%.c=$(BUILD)/obj/%.o),$(CORE_OBJS)) $(DRY_ONLY:%.c=$(BUILD)/obj/%.o)
DRY_LDLIBS = -fopenmp -lm
PROGRAMS = prepare tokenize init_model plan llmc_check sample $(TRAINERS) bench_step bench_comm
PROGRAM_BINS = $(PROGRAMS:%=$(BUILD)/%)
TEST_SRCS = $(filter-out tests/test_layers.c tests/test_gpu.c tests/test_comm_gpu.c,$(wildcard tests/test_*.c))
TEST_BINS = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(BUILD)/tests/test_layers $(BUILD)/tests/comm_misuse \
            $(BUILD)/tests/loader_order

# The CUDA build (build/cuda/): built whenever nvcc is found (CUDA_HOME, by
# default /usr/local/cuda; NCCL from NCCL_HOME, by default the same). It compiles
# on a machine without a GPU; running it needs one. GPU=0 skips it.
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
GPU       ?= $(if $(wildcard $(NVCC)),1,0)
# -arch for the local GPU when nvidia-smi can tell, else Ampere and Hopper
GPU_CC   := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d .)
comma    := ,
GENCODE   = $(if $(GPU_CC),-gencode arch=compute_$(GPU_CC)$(comma)code=sm_$(GPU_CC),\
            -gencode arch=compute_80$(comma)code=sm_80 -gencode arch=compute_90$(comma)code=sm_90)
NVCCFLAGS = -std=c++17 -O3 -I. $(GENCODE) -MMD -MP -Xcompiler -Wall -I$(NCCL_HOME)/include $(shell pkg-config --cflags ompi-c 2>/dev/null)
CUDA_LIBS = -L$(CUDA_HOME)/lib64 -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib64 \
            -lcublasLt -lcublas -lcudart -lnccl -lstdc++
CUDA_BUILD = $(BUILD)/cuda
CUDA_PROGRAMS = $(TRAINERS) llmc_check init_model
CUDA_BINS = $(CUDA_PROGRAMS:%=$(CUDA_BUILD)/%) $(CUDA_BUILD)/bench_gpu $(CUDA_BUILD)/test_gpu \
            $(CUDA_BUILD)/test_comm_gpu

.PHONY: all blas-check gpu web deps test test-quick test-plants test-portable test-plain test-asan test-asan-quick test-tsan-comm test-gpu bench vec-check bench-gpu gpu-check bench-overlap compare fuzz clean \
        check lab-start lab-grade lab-selftest
all: blas-check $(PROGRAM_BINS) $(TEST_BINS) web $(if $(filter 1,$(GPU)),gpu)

# OpenBLAS's OpenMP build, or a refusal: the pthread build's threads would fight
# the layers' OpenMP threads for the cores (a step about 1.6x slower on 2 cores,
# docs/performance.md). BLAS=any builds with whatever OpenBLAS pkg-config finds.
# And oneDNN's header, or a refusal naming the package, before any compiler error.
blas-check:
	@case "$(BLAS):$(OPENBLAS_LIBDIR)" in any:*|*openblas-openmp*) ;; \
	  *) echo "make: OpenBLAS's OpenMP build is not installed (Debian's libopenblas-openmp-dev: make deps installs" \
	          "it). With another build ($(or $(OPENBLAS_LIBDIR),none found)) its threads fight the layers' OpenMP" \
	          "threads for the cores: steps about 1.6x slower. BLAS=any builds with it anyway." >&2; exit 1 ;; esac
	@echo '#include <dnnl.h>' | $(CC) -E -x c - >/dev/null 2>&1 || { echo "make: oneDNN, the products' engine," \
	    "is not installed (Debian's libdnnl-dev: make deps installs it)" >&2; exit 1; }
gpu: $(CUDA_BINS)

$(CUDA_BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Each library is made afresh (rm first): `ar` would keep the member of a file
# since moved or removed.
$(CUDA_BUILD)/libshardlab_cuda.a: $(CORE_OBJS) $(CUDA_SRCS:%.cu=$(CUDA_BUILD)/obj/%.o)
	rm -f $@ && ar rcs $@ $^

$(CUDA_BUILD)/%: $(BUILD)/obj/examples/%.o $(CUDA_BUILD)/libshardlab_cuda.a
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) $(LDLIBS)

$(CUDA_BUILD)/train_%: $(BUILD)/obj/trainers/train_%.o $(CUDA_BUILD)/libshardlab_cuda.a
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) $(LDLIBS)

$(CUDA_BUILD)/bench_gpu: $(CUDA_BUILD)/obj/examples/bench_gpu.o $(CUDA_BUILD)/libshardlab_cuda.a
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) $(LDLIBS)

$(CUDA_BUILD)/test_gpu: $(BUILD)/obj/tests/test_gpu.o $(CUDA_BUILD)/libshardlab_cuda.a
	$(CC) $(CFLAGS) $^ -o $@ $(CHECK_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(CUDA_BUILD)/test_comm_gpu: $(BUILD)/obj/tests/test_comm_gpu.o $(CUDA_BUILD)/libshardlab_cuda.a
	$(CC) $(CFLAGS) $^ -o $@ $(CUDA_LIBS) $(LDLIBS)

# On a machine with a GPU: every kernel against the CPU, llmc_check on the GPU,
# and the strategy tests with GPU ranks (NCCL at 1 rank, 4 ranks sharing the GPU).
test-gpu: gpu
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash tests/run_gpu_tests.sh

# The element-wise loops marked "// vectorised", vectorised for this machine and for AVX2 alone, at
# the build's optimisation level (sanitizers, which keep loops scalar, left out).
vec-check:
	@CC=$(CC) FLAGS="-std=c11 -I. $(filter -O%,$(OPT)) $(CODEGEN) -D_GNU_SOURCE \
	    $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)" bash tests/check_vectorised.sh

bench-gpu: gpu
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash examples/bench_gpu.sh

# One call's worth on a GPU: kernels, memcheck, the quick GPU suite, the benchmark
# against llm.c and PyTorch, each part under a timeout (examples/gpu_check.sh).
gpu-check:
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash examples/gpu_check.sh

# The planner in a browser (docs/web.md): build/plan's own sources, the dry
# device and the simulated communication (no MPI, BLAS or OpenMP), compiled to
# WebAssembly for WASI, and the page that runs it (web/). The module is also
# written into a script as base64, so that the page opens from file:// too.
WEB_CC    ?= clang
WEB_AR    ?= llvm-ar
WEB_BUILD  = $(BUILD)/web
WEB_NATIVE = device/host_memory.c run/threads.c run/train_loop.c run/stop_signals.c run/serve.c models/gpt2_ops.c models/products.c
WEB_SRCS   = $(filter-out $(MPI_ONLY) $(WEB_NATIVE),$(CORE_SRCS)) $(DRY_ONLY) $(WEB_ONLY)
WEB_OBJS   = $(WEB_SRCS:%.c=$(WEB_BUILD)/obj/%.o)
WEB_FLAGS  = --target=wasm32-wasi -std=c11 -I. -O2 -Wall -Wextra -D_GNU_SOURCE -MMD -MP
WEB_PAGE   = $(patsubst web/%,$(WEB_BUILD)/%,$(wildcard web/*.html web/*.js))

web: $(WEB_BUILD)/plan.wasm $(WEB_BUILD)/plan_wasm.js $(WEB_PAGE)

$(WEB_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(WEB_CC) $(WEB_FLAGS) -c $< -o $@

$(WEB_BUILD)/libplan.a: $(WEB_OBJS)
	rm -f $@ && $(WEB_AR) rcs $@ $^

# 1 GiB of memory at most: the dry blocks' addresses start at 2^31 (device/cache.c)
$(WEB_BUILD)/plan.wasm: $(WEB_BUILD)/obj/plan/plan.o $(WEB_BUILD)/libplan.a
	$(WEB_CC) --target=wasm32-wasi -O2 $^ -o $@ -lm -Wl,--max-memory=1073741824 -Wl,--strip-all

$(WEB_BUILD)/plan_wasm.js: $(WEB_BUILD)/plan.wasm
	{ printf '// build/web/plan.wasm as base64 (make web): a page opened from file:// may not fetch it\n'; \
	  printf 'const PLAN_WASM_BASE64 = "'; base64 -w0 $<; printf '";\n'; } > $@

$(WEB_BUILD)/%: web/%
	@mkdir -p $(dir $@)
	cp $< $@

-include $(WEB_OBJS:.o=.d)

deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "deps: all present"; \
	elif [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else \
	    echo "deps: missing$$missing; run as root:  apt-get update && apt-get install -y$$missing"; exit 1; \
	fi

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# One trainer per strategy folder, from one source.
$(BUILD)/obj/trainers/train_%.o: examples/train.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSTRATEGY=$* -c $< -o $@

$(BUILD)/train_%: $(BUILD)/obj/trainers/train_%.o $(BUILD)/libshardlab.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/libshardlab.a: $(LIB_OBJS) | blas-check
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%: $(BUILD)/obj/examples/%.o $(BUILD)/libshardlab.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/libshardlab_dry.a: $(DRY_OBJS) | blas-check
	rm -f $@ && ar rcs $@ $^

# build/plan and the step-time model's test run on the dry device.
$(BUILD)/plan: $(BUILD)/obj/plan/plan.o $(BUILD)/libshardlab_dry.a
	$(CC) $(CFLAGS) $^ -o $@ $(DRY_LDLIBS)

$(BUILD)/tests/test_step_time: $(BUILD)/obj/tests/test_step_time.o $(BUILD)/libshardlab_dry.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(CHECK_LIBS) $(DRY_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libshardlab.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(CHECK_LIBS) $(LDLIBS)

# The layer tests take finite differences in double precision: the layers are
# compiled a second time with real_t = double, for that test alone.
$(BUILD)/obj/f64/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DSHARDLAB_REAL_DOUBLE -c $< -o $@

$(BUILD)/tests/test_layers: $(BUILD)/obj/f64/tests/test_layers.o $(BUILD)/obj/f64/models/gpt2_ops.o
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(CHECK_LIBS) $(LDLIBS)

# `deps` first, then a fresh make: the compiler flags come from pkg-config, which
# only knows the libraries once they are installed.
# SUITE="strategies plan" runs those parts alone (tests/run_tests.sh lists the keys).
test: deps
	$(MAKE) all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" SUITE="$(SUITE)" bash tests/run_tests.sh

# Every planted bug of docs/testing.md's tables (tests/plants.txt), each planted alone into a copy of the
# tree, where the part of make test the table names must go red (tests/plants.py; hours on 2 cores, run on
# demand, neither by make test nor by CI). PLANTS="word ..." plants those whose names hold one of the words.
test-plants: deps
	$(MAKE) all
	python3 tests/plants.py $(BUILD)

# The fast tier, a few minutes: unit tests, the diffs, and every strategy at N = 2
# against train_single (tests/run_quick.sh). `make test` runs all of it and more.
test-quick: deps
	$(MAKE) all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash tests/run_quick.sh

# The equivalence tier and the labs under other instruction sets of oneDNN's product kernels and thread
# counts than this machine's (tests/run_portable.sh; part of make test, and so of
# CI's): the bits must not depend on the CPU.
test-portable: deps
	$(MAKE) all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" SUITE=portable bash tests/run_tests.sh

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer, built at
# the production optimisation level (what runs is what ships, and it is faster).
# test-asan-quick: the fast tier so (CI's sanitized pass, beside make test).
ASAN_OPT = $(OPT) -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
test-asan:
	$(MAKE) BUILD=build-asan GPU=0 OPT="$(ASAN_OPT)" test
test-asan-quick:
	$(MAKE) BUILD=build-asan GPU=0 OPT="$(ASAN_OPT)" test-quick

# What a sanitized build cannot check, on the plain build: the timing table
# (bench), the address-space limits and the CUDA build's command lines (plain).
test-plain: deps
	$(MAKE) all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" SUITE="bench plain" bash tests/run_tests.sh

# The communication engine's two threads under ThreadSanitizer: test_comm at 2
# to 4 ranks, stopping at the first race (Open MPI's own hand-offs are
# suppressed: tests/tsan_mpi.supp).
test-tsan-comm:
	$(MAKE) BUILD=build-tsan GPU=0 OPT="-O1 -g -fsanitize=thread" build-tsan/tests/test_comm
	for n in 2 3 4; do \
	    TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan_mpi.supp" \
	        $(MPIRUN) -np $$n -x TSAN_OPTIONS build-tsan/tests/test_comm || exit 1; \
	done

# Fuzz the checkpoint manifest and token shard readers with libFuzzer (clang) for
# FUZZ_SECONDS each, side by side (a core each), starting from the corpora in tests/fuzz/.
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS = -std=c11 -I. -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
fuzz:
	@mkdir -p $(BUILD)/fuzz
	clang $(FUZZ_CFLAGS) tests/fuzz/fuzz_manifest.c run/ckpt_manifest.c util/crc32.c -o $(BUILD)/fuzz/fuzz_manifest
	clang $(FUZZ_CFLAGS) tests/fuzz/fuzz_shard.c run/data.c util/mt19937.c util/errors.c -o $(BUILD)/fuzz/fuzz_shard
	for target in manifest shard; do \
	    rm -rf $(BUILD)/fuzz/corpus_$$target && cp -r tests/fuzz/corpus_$$target $(BUILD)/fuzz/corpus_$$target || exit 1; \
	    { $(BUILD)/fuzz/fuzz_$$target -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	        $(BUILD)/fuzz/corpus_$$target > $(BUILD)/fuzz/$$target.log 2>&1; echo $$? > $(BUILD)/fuzz/$$target.status; } & \
	done; wait; \
	for target in manifest shard; do \
	    cat $(BUILD)/fuzz/$$target.log; [ "$$(cat $(BUILD)/fuzz/$$target.status)" = 0 ] || exit 1; \
	done

# The step against the products' engine's own rate, fp32 and bf16, with the engine chosen and each product's
# entry. ISA=sse41|avx2|avx512 runs it as another CPU family would: oneDNN capped at that instruction set
# (ONEDNN_MAX_CPU_ISA) and OpenBLAS on the matching kernels (OPENBLAS_CORETYPE), unless the environment
# sets OPENBLAS_CORETYPE already: some CPUs need theirs (docs/performance.md), and it is kept.
BENCH_ISA_sse41  = SSE41 Prescott
BENCH_ISA_avx2   = AVX2 Haswell
BENCH_ISA_avx512 = AVX512_CORE_BF16 SkylakeX
BENCH_ENV = $(if $(ISA),$(if $(BENCH_ISA_$(ISA)),ONEDNN_MAX_CPU_ISA=$(word 1,$(BENCH_ISA_$(ISA))) \
            OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-$(word 2,$(BENCH_ISA_$(ISA)))},$(error ISA=$(ISA): give sse41, avx2 or avx512)))
bench: $(BUILD)/bench_step
	@$(BENCH_ENV) sh -c 'echo "bench on$$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2):\
	    ONEDNN_MAX_CPU_ISA=$${ONEDNN_MAX_CPU_ISA:-(uncapped)} OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-(detected)}"'
	$(BENCH_ENV) $(BUILD)/bench_step --config d4 --batch 4 --seq 64
	$(BENCH_ENV) $(BUILD)/bench_step --config d12 --batch 4 --seq 64
	$(BENCH_ENV) $(BUILD)/bench_step --config d12 --batch 4 --seq 64 --precision bf16

# ZeRO-3 and FSDP with and without prefetch, next to DDP (docs/comparison.md).
bench-overlap: all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash examples/bench_overlap.sh

# The main job: the four trainers side by side, plots and a report in runs/.
compare: deps
	$(MAKE) all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" RANKS=$(RANKS) PRECISION=$(PRECISION) ARGS='$(ARGS)' bash examples/compare.sh

clean:
	rm -rf build build-asan build-tsan

.SECONDARY:
# The header dependencies of the objects of today's sources (one left from a file
# since moved or removed would ask make for that file).
DEP_SRCS = $(wildcard */*.c */*/*.c)
-include $(wildcard $(DEP_SRCS:%.c=$(BUILD)/obj/%.d) $(DEP_SRCS:%.c=$(BUILD)/obj/f64/%.d) \
                    $(TRAINERS:%=$(BUILD)/obj/trainers/%.d) $(CUDA_SRCS:%.cu=$(CUDA_BUILD)/obj/%.d))

# A homework check: STRATEGY (one of build/plan --strategies) at RANKS ranks, with
# the trainer flags in ARGS, against train_single on a tiny model, check by check
# (labs/check.py): losses, gradient norms, final model (bit for bit those of
# train_single --as-ranks N), memory per category and collectives against build/plan,
# overlap with prefetch. REFERENCE=DIR: the train_single and plan to hold BUILD's
# trainers to (default BUILD's own; the build of an unchanged tree catches a change
# that moves the reference too).
check:
	@[ -n "$(STRATEGY)" ] || { echo "make check: give STRATEGY=name (build/plan --strategies lists them; and RANKS=N, ARGS=\"...\")" >&2; exit 2; }
	$(MAKE) all
	python3 labs/check.py --strategy $(STRATEGY) --ranks $(RANKS) --args "$(ARGS)" --build $(BUILD) \
	    --reference $(or $(REFERENCE),$(BUILD)) --mpirun "$(MPIRUN)"

# The labs (labs/README.md): a working copy with the lab's functions emptied, in
# labs/work/LAB/; its grade; and the proof that every skeleton fails and the
# project's own files pass.
lab-start:
	python3 labs/lab.py start $(LAB)

lab-grade: all
	python3 labs/lab.py grade $(LAB) --build $(BUILD) --mpirun "$(MPIRUN)"

lab-selftest: all
	python3 labs/lab.py selftest --build $(BUILD) --mpirun "$(MPIRUN)"
