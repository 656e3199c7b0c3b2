// fatal_once.h: under mpirun, a fatal error is printed once for the job, naming
// the ranks only when they failed differently (fatal_once.c). comm_init installs
// it for MPI_COMM_WORLD; comm_finalize removes it before MPI ends.
#ifndef SHARDLAB_FATAL_ONCE_H
#define SHARDLAB_FATAL_ONCE_H

// Collective over MPI_COMM_WORLD; does nothing for a single rank.
void fatal_once_install(int rank, int world);
void fatal_once_uninstall(void);

#endif
