build-hsw/obj/run/checkpoint.o: run/checkpoint.c run/checkpoint.h \
 models/gpt2.h device/dtype.h device/memory.h device/cache.h \
 device/optim.h models/dropout.h util/random.h run/ckpt_manifest.h \
 comm/comm.h kit/strategy.h models/gpt2_io.h util/cli.h util/crc32.h \
 device/device.h device/quantize.h util/errors.h
run/checkpoint.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
run/ckpt_manifest.h:
comm/comm.h:
kit/strategy.h:
models/gpt2_io.h:
util/cli.h:
util/crc32.h:
device/device.h:
device/quantize.h:
util/errors.h:
