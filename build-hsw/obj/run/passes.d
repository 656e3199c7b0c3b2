build-hsw/obj/run/passes.o: run/passes.c run/passes.h models/gpt2.h \
 device/dtype.h device/memory.h device/cache.h device/optim.h \
 models/dropout.h util/random.h comm/comm.h kit/strategy.h \
 models/gpt2_io.h util/cli.h run/trace.h device/mem_timeline.h \
 device/device.h device/quantize.h
run/passes.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
comm/comm.h:
kit/strategy.h:
models/gpt2_io.h:
util/cli.h:
run/trace.h:
device/mem_timeline.h:
device/device.h:
device/quantize.h:
