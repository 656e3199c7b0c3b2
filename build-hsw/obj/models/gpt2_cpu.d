build-hsw/obj/models/gpt2_cpu.o: models/gpt2_cpu.c util/errors.h \
 util/timer.h models/gpt2.h device/dtype.h device/memory.h device/cache.h \
 device/optim.h models/dropout.h util/random.h models/gpt2_ops.h
util/errors.h:
util/timer.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
models/gpt2_ops.h:
