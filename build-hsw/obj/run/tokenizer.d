build-hsw/obj/run/tokenizer.o: run/tokenizer.c run/tokenizer.h \
 util/strmap.h util/errors.h util/json.h util/unicode_tables.h \
 util/utf8.h
run/tokenizer.h:
util/strmap.h:
util/errors.h:
util/json.h:
util/unicode_tables.h:
util/utf8.h:
