build-hsw/obj/device/optim.o: device/optim.c device/optim.h \
 device/dtype.h
device/optim.h:
device/dtype.h:
