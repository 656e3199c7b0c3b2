build-hsw/obj/comm/sim_clock.o: comm/sim_clock.c comm/sim_clock.h \
 comm/comm.h device/dtype.h util/errors.h
comm/sim_clock.h:
comm/comm.h:
device/dtype.h:
util/errors.h:
