build-hsw/obj/models/gpt2_io.o: models/gpt2_io.c models/gpt2_io.h \
 models/gpt2.h device/dtype.h device/memory.h device/cache.h \
 device/optim.h models/dropout.h util/random.h util/errors.h
models/gpt2_io.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
util/errors.h:
