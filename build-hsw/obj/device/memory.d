build-hsw/obj/device/memory.o: device/memory.c device/memory.h \
 device/cache.h util/errors.h util/timer.h
device/memory.h:
device/cache.h:
util/errors.h:
util/timer.h:
