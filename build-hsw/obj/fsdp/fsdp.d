build-hsw/obj/fsdp/fsdp.o: fsdp/fsdp.c kit/kit.h device/device.h \
 device/dtype.h device/memory.h device/cache.h device/optim.h \
 device/quantize.h kit/partition.h models/gpt2.h models/dropout.h \
 util/random.h kit/replicas.h kit/resident.h kit/strategy.h \
 models/gpt2_io.h comm/comm.h util/cli.h kit/shard_groups.h \
 kit/unit_buffers.h kit/zeropp.h util/errors.h fsdp/fsdp.h
kit/kit.h:
device/device.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
device/quantize.h:
kit/partition.h:
models/gpt2.h:
models/dropout.h:
util/random.h:
kit/replicas.h:
kit/resident.h:
kit/strategy.h:
models/gpt2_io.h:
comm/comm.h:
util/cli.h:
kit/shard_groups.h:
kit/unit_buffers.h:
kit/zeropp.h:
util/errors.h:
fsdp/fsdp.h:
