build-hsw/obj/device/mem_timeline.o: device/mem_timeline.c \
 device/mem_timeline.h device/memory.h device/cache.h util/errors.h \
 util/timer.h
device/mem_timeline.h:
device/memory.h:
device/cache.h:
util/errors.h:
util/timer.h:
