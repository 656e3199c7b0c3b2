# shardlab: `make` builds everything into build/, `make test` runs every test.
# Run `make deps` first on a fresh Debian/Ubuntu machine.

BUILD    ?= build
CC       ?= gcc
OPT      ?= -O2 -march=native
RANKS    ?= 4
PKGS      = ompi-c openblas
CFLAGS   += -std=c11 $(OPT) -Wall -Wextra -D_GNU_SOURCE -MMD -MP $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
# mpirun as root needs --allow-run-as-root; more ranks than cores need --oversubscribe.
MPIRUN   ?= mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root) \
            --mca btl self,vader -x OPENBLAS_NUM_THREADS=1

DEB_PACKAGES = build-essential pkg-config openmpi-bin libopenmpi-dev check libsubunit-dev \
               libopenblas-dev gnuplot-nox python3 clang libclang-rt-14-dev procps

LIB_SRCS = $(filter-out common/comm_nccl_stub.c,$(wildcard common/*.c)) common/comm_nccl_stub.c \
           models/gpt2.c models/gpt2_ops.c models/gpt2_io.c ddp/ddp.c zero3/zero3.c fsdp/fsdp.c
LIB_OBJS = $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
PROGRAMS = prepare tokenize init_model plan llmc_check train_single train_ddp train_zero3 train_fsdp \
           bench_step bench_comm
PROGRAM_BINS = $(PROGRAMS:%=$(BUILD)/%)
TEST_SRCS = $(filter-out tests/test_layers.c,$(wildcard tests/test_*.c))
TEST_BINS = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(BUILD)/tests/test_layers $(BUILD)/tests/comm_misuse

.PHONY: all deps test test-asan bench compare fuzz clean
all: $(PROGRAM_BINS) $(TEST_BINS)

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

$(BUILD)/libshardlab.a: $(LIB_OBJS)
	ar rcs $@ $^

$(BUILD)/%: $(BUILD)/obj/examples/%.o $(BUILD)/libshardlab.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

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

test: all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" bash tests/run_tests.sh

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

# Fuzz the checkpoint manifest and token shard readers with libFuzzer (clang) for
# FUZZ_SECONDS each, starting from the corpora in tests/fuzz/.
FUZZ_SECONDS ?= 30
FUZZ_CFLAGS = -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
fuzz:
	@mkdir -p $(BUILD)/fuzz
	clang $(FUZZ_CFLAGS) tests/fuzz/fuzz_manifest.c common/ckpt_manifest.c common/crc32.c -o $(BUILD)/fuzz/fuzz_manifest
	clang $(FUZZ_CFLAGS) tests/fuzz/fuzz_shard.c common/data.c common/errors.c -o $(BUILD)/fuzz/fuzz_shard
	for target in manifest shard; do \
	    rm -rf $(BUILD)/fuzz/corpus_$$target && cp -r tests/fuzz/corpus_$$target $(BUILD)/fuzz/corpus_$$target && \
	    $(BUILD)/fuzz/fuzz_$$target -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	        $(BUILD)/fuzz/corpus_$$target || exit 1; \
	done

bench: $(BUILD)/bench_step
	$(BUILD)/bench_step --config d4 --batch 4 --seq 64
	$(BUILD)/bench_step --config d12 --batch 4 --seq 64

# The main job: the four trainers side by side, plots and a report in runs/.
compare: deps all
	BUILD=$(BUILD) MPIRUN="$(MPIRUN)" RANKS=$(RANKS) bash examples/compare.sh

clean:
	rm -rf build build-asan

.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
