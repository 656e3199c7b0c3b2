build-hsw/obj/kit/replicas.o: kit/replicas.c kit/replicas.h \
 kit/resident.h kit/partition.h models/gpt2.h device/dtype.h \
 device/memory.h device/cache.h device/optim.h models/dropout.h \
 util/random.h kit/strategy.h models/gpt2_io.h comm/comm.h util/cli.h \
 util/errors.h
kit/replicas.h:
kit/resident.h:
kit/partition.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
kit/strategy.h:
models/gpt2_io.h:
comm/comm.h:
util/cli.h:
util/errors.h:
