build-hsw/obj/util/cli.o: util/cli.c util/cli.h util/errors.h
util/cli.h:
util/errors.h:
