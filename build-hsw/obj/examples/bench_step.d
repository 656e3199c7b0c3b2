build-hsw/obj/examples/bench_step.o: examples/bench_step.c \
 /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h \
 /usr/include/x86_64-linux-gnu/openblas-openmp/openblas_config.h \
 util/cli.h util/errors.h device/optim.h device/dtype.h run/threads.h \
 util/timer.h models/gpt2.h device/memory.h device/cache.h \
 models/dropout.h util/random.h
/usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h:
/usr/include/x86_64-linux-gnu/openblas-openmp/openblas_config.h:
util/cli.h:
util/errors.h:
device/optim.h:
device/dtype.h:
run/threads.h:
util/timer.h:
models/gpt2.h:
device/memory.h:
device/cache.h:
models/dropout.h:
util/random.h:
