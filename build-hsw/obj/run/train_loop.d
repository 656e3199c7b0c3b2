build-hsw/obj/run/train_loop.o: run/train_loop.c run/train_loop.h \
 kit/strategy.h models/gpt2.h device/dtype.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 models/gpt2_io.h comm/comm.h util/cli.h run/agree.h run/data.h \
 util/mt19937.h run/options.h run/checkpoint.h run/ckpt_manifest.h \
 device/device.h device/quantize.h util/errors.h device/mem_timeline.h \
 run/passes.h run/trace.h util/timer.h run/threads.h
run/train_loop.h:
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
run/agree.h:
run/data.h:
util/mt19937.h:
run/options.h:
run/checkpoint.h:
run/ckpt_manifest.h:
device/device.h:
device/quantize.h:
util/errors.h:
device/mem_timeline.h:
run/passes.h:
run/trace.h:
util/timer.h:
run/threads.h:
