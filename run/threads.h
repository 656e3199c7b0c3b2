// threads.h: how many threads a rank computes with. The products' engine (oneDNN,
// or OpenBLAS's OpenMP build) and the layers' loops (models/gpt2_ops.c) share one
// OpenMP pool, so one number sets both. With R ranks on a node of C cores, each rank takes max(1, C / R)
// threads, so that ranks sharing a machine do not oversubscribe its cores;
// OMP_NUM_THREADS, when set, decides instead (at most 16 a core: more is refused).
// It also has the products' engine chosen (models/products.c), so that a bad
// SHARDLAB_PRODUCTS or ONEDNN_MAX_CPU_ISA stops the run before any work.
#ifndef SHARDLAB_THREADS_H
#define SHARDLAB_THREADS_H

// Sets the thread count for this process and returns it. cores (may be NULL)
// receives the cores this process may run on.
int threads_configure(int ranks_on_node, int *cores);
// The machine's online cores, whatever this process is bound to (mpirun binds
// each rank to one core when there are no more ranks than cores).
int threads_cores_on_node(void);

#endif
