build-hsw/obj/comm/fatal_once.o: comm/fatal_once.c comm/fatal_once.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h \
 /usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h \
 util/errors.h util/timer.h
comm/fatal_once.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:
/usr/lib/x86_64-linux-gnu/openmpi/include/mpi_portable_platform.h:
util/errors.h:
util/timer.h:
