build-hsw/obj/run/trace.o: run/trace.c run/trace.h comm/comm.h \
 device/dtype.h device/mem_timeline.h device/memory.h device/cache.h \
 device/device.h device/optim.h device/quantize.h util/errors.h \
 util/timer.h
run/trace.h:
comm/comm.h:
device/dtype.h:
device/mem_timeline.h:
device/memory.h:
device/cache.h:
device/device.h:
device/optim.h:
device/quantize.h:
util/errors.h:
util/timer.h:
