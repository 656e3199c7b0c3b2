build-hsw/obj/util/errors.o: util/errors.c util/errors.h
util/errors.h:
