build-hsw/obj/comm/nccl_stub.o: comm/nccl_stub.c comm/backend.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 comm/comm.h device/dtype.h comm/node.h util/errors.h
comm/backend.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
comm/comm.h:
device/dtype.h:
comm/node.h:
util/errors.h:
