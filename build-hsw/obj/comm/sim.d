build-hsw/obj/comm/sim.o: comm/sim.c comm/sim.h comm/comm.h \
 device/dtype.h comm/backend.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 comm/node.h comm/sim_clock.h util/errors.h
comm/sim.h:
comm/comm.h:
device/dtype.h:
comm/backend.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
comm/node.h:
comm/sim_clock.h:
util/errors.h:
