build-hsw/obj/util/json.o: util/json.c util/json.h util/errors.h \
 util/utf8.h
util/json.h:
util/errors.h:
util/utf8.h:
