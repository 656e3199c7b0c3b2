build-hsw/obj/comm/mpi.o: comm/mpi.c comm/backend.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 comm/comm.h device/dtype.h comm/node.h comm/fatal_once.h \
 comm/mpi_check.h util/errors.h device/device.h device/memory.h \
 device/cache.h device/optim.h device/quantize.h util/timer.h
comm/backend.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
comm/comm.h:
device/dtype.h:
comm/node.h:
comm/fatal_once.h:
comm/mpi_check.h:
util/errors.h:
device/device.h:
device/memory.h:
device/cache.h:
device/optim.h:
device/quantize.h:
util/timer.h:
