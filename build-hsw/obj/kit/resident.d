build-hsw/obj/kit/resident.o: kit/resident.c kit/resident.h \
 kit/partition.h models/gpt2.h device/dtype.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 kit/strategy.h models/gpt2_io.h comm/comm.h util/cli.h device/device.h \
 device/quantize.h comm/sim_clock.h util/errors.h util/timer.h
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
device/device.h:
device/quantize.h:
comm/sim_clock.h:
util/errors.h:
util/timer.h:
