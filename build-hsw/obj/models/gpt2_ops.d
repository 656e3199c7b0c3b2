build-hsw/obj/models/gpt2_ops.o: models/gpt2_ops.c models/gpt2_ops.h \
 models/dropout.h util/random.h \
 /usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h \
 /usr/include/x86_64-linux-gnu/openblas-openmp/openblas_config.h
models/gpt2_ops.h:
models/dropout.h:
util/random.h:
/usr/include/x86_64-linux-gnu/openblas-openmp/cblas.h:
/usr/include/x86_64-linux-gnu/openblas-openmp/openblas_config.h:
