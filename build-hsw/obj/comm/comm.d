build-hsw/obj/comm/comm.o: comm/comm.c comm/comm.h device/dtype.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 comm/backend.h comm/node.h comm/mpi_check.h util/errors.h util/timer.h
comm/comm.h:
device/dtype.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
comm/backend.h:
comm/node.h:
comm/mpi_check.h:
util/errors.h:
util/timer.h:
