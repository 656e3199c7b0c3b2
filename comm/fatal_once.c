// fatal_once.c: a fatal error under mpirun, printed once for the job.
//
// Most errors are found by every rank at the same point (a flag value that does
// not fit, an unreadable checkpoint, a NaN loss that all ranks averaged): each
// printing its own, the terminal would show the same line N times. Instead a
// failing rank sends its message to rank 0, on a communicator kept for this:
//
//   rank r > 0:  send message --------> rank 0: collect messages for up to COLLECT_S
//                wait up to ACK_S <---  print each distinct message once, then
//                for the acknowledgement  acknowledge every sender, exit
//
// Rank 0 prints a message bare when every rank that reported sent the same one,
// and names the ranks when they differ ("rank 2: ...", "ranks 0, 1: ..."). A rank
// whose acknowledgement never comes (rank 0 is not failing) prints its message
// itself, naming its rank. Every wait polls against a deadline, so even a broken
// MPI cannot turn an error into a hang.
#include "comm/fatal_once.h"

#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/errors.h"
#include "util/timer.h"

#define COLLECT_S 1.5      // rank 0 waits this long for the other ranks' messages
#define ACK_S 4.0          // the others wait longer for rank 0's acknowledgement
#define MESSAGE_MAX 8192   // a message's bytes, its NUL included
#define RANKS_NAMED 8      // "ranks 0, 1, ... (and K more)"
#define TAG_MESSAGE 1
#define TAG_ACK 2

// What fatal() reaches from wherever it is called: the reporter has no other
// way in (errors.h), so its communicator and rank are file-scope state.
static MPI_Comm report_comm = MPI_COMM_NULL;
static int report_rank, report_world;
static atomic_int reporting;  // a second thread failing at the same time waits for the first to exit

static void pause_briefly(void) { nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL); }

static void __attribute__((noreturn)) print_with_rank_and_exit(const char *message) {
    char text[MESSAGE_MAX + 32];
    snprintf(text, sizeof text, "rank %d: %s", report_rank, message);
    error_print(text);
    exit(1);
}

// 1 when rank r failed and no lower rank failed with the same message.
static int first_with_its_message(char **messages, int r) {
    if (!messages[r]) return 0;
    for (int q = 0; q < r; q++)
        if (messages[q] && strcmp(messages[q], messages[r]) == 0) return 0;
    return 1;
}

// Rank 0: the messages of the ranks that failed (messages[r] NULL for the others),
// each distinct one once, bare when there is only one.
static void print_distinct(char **messages) {
    int distinct = 0;
    for (int r = 0; r < report_world; r++) distinct += first_with_its_message(messages, r);
    for (int r = 0; r < report_world; r++) {
        if (!first_with_its_message(messages, r)) continue;
        if (distinct == 1) {
            error_print(messages[r]);
            return;
        }
        char ranks[256], text[MESSAGE_MAX + 256];
        int n = 0, count = 0;
        for (int q = r; q < report_world; q++) {
            if (!messages[q] || strcmp(messages[q], messages[r]) != 0) continue;
            if (count++ < RANKS_NAMED) n += snprintf(ranks + n, sizeof ranks - (size_t)n, "%s%d", n ? ", " : "", q);
        }
        if (count > RANKS_NAMED) snprintf(ranks + n, sizeof ranks - (size_t)n, " (and %d more)", count - RANKS_NAMED);
        snprintf(text, sizeof text, "rank%s %s: %s", count > 1 ? "s" : "", ranks, messages[r]);
        error_print(text);
    }
}

static void __attribute__((noreturn)) report_as_root(const char *message) {
    char **messages = calloc((size_t)report_world, sizeof *messages);
    if (!messages) {
        error_print(message);
        exit(1);
    }
    messages[0] = (char *)message;
    int received = 0;
    for (double deadline = timer_now() + COLLECT_S; received < report_world - 1 && timer_now() < deadline;) {
        int arrived = 0;
        MPI_Status status;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_MESSAGE, report_comm, &arrived, &status) != MPI_SUCCESS) break;
        if (!arrived) { pause_briefly(); continue; }
        char *text = calloc(MESSAGE_MAX + 1, 1);  // a NUL past the longest message, whatever arrives
        if (!text || MPI_Recv(text, MESSAGE_MAX, MPI_CHAR, status.MPI_SOURCE, TAG_MESSAGE, report_comm,
                              MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        if (status.MPI_SOURCE > 0 && status.MPI_SOURCE < report_world && !messages[status.MPI_SOURCE]) received++;
        messages[status.MPI_SOURCE] = text;
    }
    print_distinct(messages);
    // the senders exit once acknowledged: only now, so that mpirun cannot end
    // this rank before its print
    static const int ack = 1;
    MPI_Request *acks = calloc((size_t)report_world, sizeof *acks);
    int sent = 0;
    for (int r = 1; acks && r < report_world; r++)
        if (messages[r] && MPI_Isend(&ack, 1, MPI_INT, r, TAG_ACK, report_comm, &acks[sent]) == MPI_SUCCESS) sent++;
    for (double deadline = timer_now() + 0.5; acks && sent && timer_now() < deadline; pause_briefly()) {
        int done = 0;
        if (MPI_Testall(sent, acks, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done) break;
    }
    exit(1);
}

static void __attribute__((noreturn)) report_to_root(const char *message) {
    MPI_Request send, receive;
    int ack = 0, sent = 0, acknowledged = 0;
    if (MPI_Isend(message, (int)strnlen(message, MESSAGE_MAX - 1) + 1, MPI_CHAR, 0, TAG_MESSAGE, report_comm,
                  &send) != MPI_SUCCESS ||
        MPI_Irecv(&ack, 1, MPI_INT, 0, TAG_ACK, report_comm, &receive) != MPI_SUCCESS)
        print_with_rank_and_exit(message);
    for (double deadline = timer_now() + ACK_S; !acknowledged && timer_now() < deadline;) {
        if (!sent && MPI_Test(&send, &sent, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (MPI_Test(&receive, &acknowledged, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (!acknowledged) pause_briefly();
    }
    if (!acknowledged) print_with_rank_and_exit(message);
    exit(1);  // rank 0 has printed it
}

static void report_once(const char *message) {
    if (atomic_exchange(&reporting, 1))
        for (;;) pause();  // another thread of this rank is reporting; it ends the process
    if (report_rank == 0) report_as_root(message);
    report_to_root(message);
}

void fatal_once_install(int rank, int world) {
    if (world < 2 || report_comm != MPI_COMM_NULL) return;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &report_comm) != MPI_SUCCESS) return;  // errors then print on every rank
    MPI_Comm_set_errhandler(report_comm, MPI_ERRORS_RETURN);
    report_rank = rank;
    report_world = world;
    fatal_set_reporter(report_once);
}

void fatal_once_uninstall(void) {
    if (report_comm == MPI_COMM_NULL) return;
    fatal_set_reporter(NULL);
    MPI_Comm_free(&report_comm);
}
