build-hsw/obj/run/data.o: run/data.c run/data.h util/mt19937.h \
 util/errors.h
run/data.h:
util/mt19937.h:
util/errors.h:
