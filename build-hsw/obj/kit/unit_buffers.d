build-hsw/obj/kit/unit_buffers.o: kit/unit_buffers.c kit/unit_buffers.h \
 comm/comm.h device/dtype.h device/memory.h device/cache.h \
 device/quantize.h kit/strategy.h models/gpt2.h device/optim.h \
 models/dropout.h util/random.h models/gpt2_io.h util/cli.h \
 device/device.h kit/partition.h util/errors.h
kit/unit_buffers.h:
comm/comm.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/quantize.h:
kit/strategy.h:
models/gpt2.h:
device/optim.h:
models/dropout.h:
util/random.h:
models/gpt2_io.h:
util/cli.h:
device/device.h:
kit/partition.h:
util/errors.h:
