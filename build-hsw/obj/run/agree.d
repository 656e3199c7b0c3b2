build-hsw/obj/run/agree.o: run/agree.c run/agree.h comm/comm.h \
 device/dtype.h run/data.h util/mt19937.h run/options.h kit/strategy.h \
 models/gpt2.h device/memory.h device/cache.h device/optim.h \
 models/dropout.h util/random.h models/gpt2_io.h util/cli.h \
 run/checkpoint.h run/ckpt_manifest.h device/device.h device/quantize.h \
 util/errors.h
run/agree.h:
comm/comm.h:
device/dtype.h:
run/data.h:
util/mt19937.h:
run/options.h:
kit/strategy.h:
models/gpt2.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
models/gpt2_io.h:
util/cli.h:
run/checkpoint.h:
run/ckpt_manifest.h:
device/device.h:
device/quantize.h:
util/errors.h:
