build-hsw/obj/util/crc32.o: util/crc32.c util/crc32.h
util/crc32.h:
