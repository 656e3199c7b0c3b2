build-hsw/obj/device/dtype.o: device/dtype.c device/dtype.h
device/dtype.h:
