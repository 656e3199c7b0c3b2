build-hsw/obj/comm/node.o: comm/node.c comm/node.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 comm/comm.h device/dtype.h comm/mpi_check.h util/errors.h
comm/node.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
comm/comm.h:
device/dtype.h:
comm/mpi_check.h:
util/errors.h:
