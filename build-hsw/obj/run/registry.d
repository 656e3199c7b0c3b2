build-hsw/obj/run/registry.o: run/registry.c run/registry.h \
 kit/strategy.h models/gpt2.h device/dtype.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 models/gpt2_io.h comm/comm.h util/cli.h util/errors.h
run/registry.h:
kit/strategy.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
models/gpt2_io.h:
comm/comm.h:
util/cli.h:
util/errors.h:
