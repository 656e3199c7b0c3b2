build-hsw/obj/util/mt19937.o: util/mt19937.c util/mt19937.h
util/mt19937.h:
