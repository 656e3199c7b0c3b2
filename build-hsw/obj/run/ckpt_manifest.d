build-hsw/obj/run/ckpt_manifest.o: run/ckpt_manifest.c \
 run/ckpt_manifest.h models/gpt2.h device/dtype.h device/memory.h \
 device/cache.h device/optim.h models/dropout.h util/random.h \
 util/crc32.h
run/ckpt_manifest.h:
models/gpt2.h:
device/dtype.h:
device/memory.h:
device/cache.h:
device/optim.h:
models/dropout.h:
util/random.h:
util/crc32.h:
