build-hsw/obj/models/gpt2.o: models/gpt2.c models/gpt2.h device/dtype.h \
 device/memory.h device/cache.h device/optim.h models/dropout.h \
 util/random.h device/device.h device/quantize.h util/errors.h
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
device/device.h:
device/quantize.h:
util/errors.h:
