build-hsw/obj/kit/strategy.o: kit/strategy.c kit/strategy.h models/gpt2.h \
 device/dtype.h device/memory.h device/cache.h device/optim.h \
 models/dropout.h util/random.h models/gpt2_io.h comm/comm.h util/cli.h \
 kit/partition.h
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
kit/partition.h:
