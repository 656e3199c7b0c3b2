build-hsw/obj/device/quantize.o: device/quantize.c device/quantize.h \
 device/dtype.h util/errors.h
device/quantize.h:
device/dtype.h:
util/errors.h:
