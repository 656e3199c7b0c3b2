build-hsw/obj/kit/shard_groups.o: kit/shard_groups.c kit/shard_groups.h \
 kit/strategy.h models/gpt2.h device/dtype.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 models/gpt2_io.h comm/comm.h util/cli.h kit/unit_buffers.h \
 device/quantize.h util/errors.h
kit/shard_groups.h:
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
kit/unit_buffers.h:
device/quantize.h:
util/errors.h:
