build-hsw/obj/device/device_cpu.o: device/device_cpu.c device/device.h \
 device/dtype.h device/memory.h device/cache.h device/optim.h \
 device/quantize.h util/errors.h
device/device.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
device/quantize.h:
util/errors.h:
