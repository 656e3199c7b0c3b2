build-hsw/obj/kit/zeropp.o: kit/zeropp.c kit/zeropp.h device/quantize.h \
 device/dtype.h kit/strategy.h models/gpt2.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 models/gpt2_io.h comm/comm.h util/cli.h kit/unit_buffers.h \
 device/device.h kit/partition.h util/errors.h
kit/zeropp.h:
device/quantize.h:
device/dtype.h:
kit/strategy.h:
models/gpt2.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
models/gpt2_io.h:
comm/comm.h:
util/cli.h:
kit/unit_buffers.h:
device/device.h:
kit/partition.h:
util/errors.h:
