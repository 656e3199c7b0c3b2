build-hsw/obj/device/cache.o: device/cache.c device/cache.h util/errors.h
device/cache.h:
util/errors.h:
