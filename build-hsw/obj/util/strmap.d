build-hsw/obj/util/strmap.o: util/strmap.c util/strmap.h util/errors.h
util/strmap.h:
util/errors.h:
