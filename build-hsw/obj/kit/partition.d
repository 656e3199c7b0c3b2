build-hsw/obj/kit/partition.o: kit/partition.c kit/partition.h \
 models/gpt2.h device/dtype.h device/memory.h device/cache.h \
 device/optim.h models/dropout.h util/random.h util/errors.h
kit/partition.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
util/errors.h:
