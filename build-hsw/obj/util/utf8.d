build-hsw/obj/util/utf8.o: util/utf8.c util/utf8.h
util/utf8.h:
