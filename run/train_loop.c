// train_loop.c: one training run. Per step:
//
//   rank's slice of the global batch -> for each of its K micro-batches:
//   forward units 0..U-1, backward U-1..0 -> finish_grads -> AdamW step -> log (rank 0)
//
// with the strategy's hooks around every unit. Timing splits each step into
// communication wait (from comm's counters), optimizer, and compute (the rest).
#include "run/train_loop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/gpt2_io.h"
#include "models/gpt2_ops.h"
#include "run/agree.h"
#include "run/checkpoint.h"
#include "run/data.h"
#include "device/device.h"
#include "util/errors.h"
#include "device/mem_timeline.h"
#include "run/options.h"
#include "run/passes.h"
#include "run/stop_signals.h"
#include "run/test_hooks.h"
#include "util/timer.h"
#include "run/threads.h"
#include "run/trace.h"

// What rank 0 puts in the summary line for each rank.
typedef struct {
    MemAccount mem;
    size_t rss_peak_bytes;
    uint64_t reserved_peak_bytes;  // the peak of what the allocator held: in use + cached (device.h)
    CommStats comm_total;      // the whole run (evaluation and final gather included)
    CommStats comm_last_step;  // the last training step alone
    CommStats across_last_step;  // the part of it between replica groups (FSDP's --shard-group)
    double step_s;             // this rank's training steps: compute_s + comm_wait_s + optim_s
    double compute_s, comm_wait_s, optim_s;
    double last_grad_norm;     // as this rank computed it (NAN without --grad-clip)
    int timeline_step;         // the step whose memory timeline was kept (0: none)
    uint64_t timeline_start[MEM_NUM_CATEGORIES];  // each category's bytes as that step began
    long minor_faults;         // page faults served without I/O from the first training step to the
                               // last (checkpoints and evaluations included): each is a page the OS
                               // handed this process afresh (first touch)
} RankSummary;

typedef struct {
    TrainOptions opts;
    const StrategyPlugin *plugin;
    CliOption flags[OPTIONS_MAX_FLAGS];  // (num_flags) the shared flags, then the strategy's
    int given[OPTIONS_MAX_FLAGS];        // (num_flags) 1 for each the command line gave
    int num_flags;
    int threads, cores;                  // this rank's compute threads, and the cores it may use
    int last_step;                       // the last step trained (first_step - 1 if none)
    int stopped_by_signal;               // 1 if a signal ended the run before --steps
    Comm comm;
    MemAccount mem;
    GPT2 model;
    RunSettings settings;       // what the strategy's kept state follows (kit/strategy.h)
    Strategy strategy;
    DataLoader train, val;
    int have_val;
    Trace trace;
    MemTimeline timeline;       // one step's allocations and frees (--timeline-step, or the last)
    FILE *log;
    RankSummary summary;
    int first_step;             // 1, or the step after the checkpoint resumed from
    int as_ranks;               // the ranks whose rows this one runs: 1, or train_single's --as-ranks N
    LrSchedule schedule;
    int ckpt_lock;              // rank 0: the --ckpt-dir, open and locked (-1: none)
    TestHooks test_hooks;       // what the tests ask of a run (run/test_hooks.h)
} Run;

static long minor_faults_so_far(void) {
    struct rusage usage;
    CHECK(getrusage(RUSAGE_SELF, &usage) == 0, "getrusage: %s", strerror(errno));
    return usage.ru_minflt;
}

static double comm_seconds(const CommStats *s) {
    double total = 0;
    for (int i = 0; i < COMM_NUM_OPS; i++) total += s->ops[i].seconds;
    return total;
}

// Points the model at micro-batch `micro` of the rank's rows: (B/N/K, T) each;
// `step` is the training step it is for (0: evaluation). Dropout's masks follow
// each token's row in the global batch: this rank's rows start at rank * B/N, its
// micro-batch `micro` micro * B/(N K) after. (train_single --as-ranks N: micro-batch
// k of simulated rank r is micro r K + k, at row r B/N + k B/(N K).)
static void set_micro_batch(Run *run, const DataLoader *loader, int micro, int step) {
    size_t tokens = (size_t)run->model.B * run->model.T;
    gpt2_set_batch(&run->model, loader->inputs + micro * tokens, loader->targets + micro * tokens);
    run->model.dropout_step = step;
    run->model.row0 = loader->rank * (loader->B / loader->world) + micro * run->model.B;
}

// The mean over the ranks of each one's `loss[r]`, added in rank order as
// comm_metric_average does: with --as-ranks, the simulated ranks' mean.
static double mean_over_ranks(Run *run, const double *loss) {
    double sum = 0;
    for (int r = 0; r < run->as_ranks; r++) sum += loss[r];
    return comm_metric_average(&run->comm, sum / run->as_ranks);  // (x / 1 is x: one rank's is unchanged)
}

// The validation loss, the mean over --eval-batches batches; with `ema`, of the
// EMA weights, which take the weights' place for the pass (swap_ema) and give it
// back after.
static double evaluate(Run *run, int ema) {
    if (ema) run->strategy.swap_ema(run->strategy.state);
    int tracing = run->trace.enabled;
    run->trace.enabled = 0;  // the timeline shows training steps only
    loader_reset(&run->val);
    double *sum = xcalloc((size_t)run->as_ranks, sizeof *sum);
    int micro_batches = run->opts.grad_accum;
    for (int i = 0; i < run->opts.eval_batches; i++) {
        loader_next_batch(&run->val);
        for (int r = 0; r < run->as_ranks; r++)
            for (int micro = 0; micro < micro_batches; micro++) {
                set_micro_batch(run, &run->val, r * micro_batches + micro, 0);  // nothing dropped
                forward_pass(&run->model, &run->strategy, &run->trace, 0);
                sum[r] += run->model.mean_loss;
            }
    }
    run->trace.enabled = tracing;
    if (ema) run->strategy.swap_ema(run->strategy.state);
    for (int r = 0; r < run->as_ranks; r++) sum[r] /= (double)run->opts.eval_batches * micro_batches;
    double mean = mean_over_ranks(run, sum);
    free(sum);
    return mean;
}

// Creates `path`, or opens it without truncating if it exists, so that an output
// that cannot be written stops the run before training rather than after; a
// file created here is removed again.
static void check_writable(const char *flag, const char *value, const char *path) {
    struct stat st;  // opening a FIFO for writing would wait for a reader
    if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) fatal("%s %s: not a regular file (a FIFO)", flag, value);
    int existed = access(path, F_OK) == 0;
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0 && strcmp(value, path) == 0) fatal("%s %s: cannot write: %s", flag, value, strerror(errno));
    if (fd < 0) fatal("%s %s: cannot write %s: %s", flag, value, path, strerror(errno));
    close(fd);
    if (!existed && unlink(path) != 0) fatal("%s %s: cannot remove %s: %s", flag, value, path, strerror(errno));
}

// --out-model is written to PATH.tmp and renamed over PATH (replace_begin in
// errors.h): PATH must be a regular file or absent, and PATH.tmp creatable.
static void check_replaceable(const char *flag, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fatal("%s %s: not a regular file (%s): the file is written beside it and renamed over it", flag, path,
              file_kind(st.st_mode));
    check_writable(flag, path, path);
    char tmp[4200];
    xsnprintf(tmp, sizeof tmp, "%s.tmp", path);
    check_writable(flag, path, tmp);
}

// The longest path a save makes under --ckpt-dir, checked now rather than at
// the first save.
static void check_checkpoint_path_length(const char *dir, int steps, int world) {
    int longest = snprintf(NULL, 0, "%s/step_%08d.tmp/rank_%05d.bin", dir, steps, world - 1);
    if (longest >= PATH_MAX)
        fatal("--ckpt-dir %s: too long: the files of a checkpoint under it would have paths of %d characters, "
              "the system allows %d", dir, longest, PATH_MAX - 1);
}

// The pid of the process holding a flock on the open file `fd`, from the kernel's
// list of locks (/proc/locks: "1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> ..."),
// or 0 when it cannot tell.
static long lock_holder(int fd) {
    struct stat st;
    FILE *f = fopen("/proc/locks", "r");
    if (!f || fstat(fd, &st) != 0) {
        if (f) fclose(f);
        return 0;
    }
    char line[256];
    long found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        long pid;
        unsigned major, minor;
        unsigned long inode;
        if (sscanf(line, "%*d: FLOCK %*s %*s %ld %x:%x:%lu", &pid, &major, &minor, &inode) == 4 &&
            inode == (unsigned long)st.st_ino && makedev(major, minor) == st.st_dev)
            found = pid;
    }
    fclose(f);
    return found;
}

// One run at a time saves into a --ckpt-dir: rank 0 holds an exclusive lock
// (flock) on the directory itself for the whole run, so nothing is written into
// it. The kernel drops the lock when the process ends, however it ends (a crash
// or kill -9 included).
static int lock_checkpoint_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fatal("--ckpt-dir %s: cannot open the directory: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) fatal("--ckpt-dir %s: cannot lock the directory: %s", dir, strerror(errno));
    long holder = lock_holder(fd);
    if (holder) fatal("--ckpt-dir %s is in use by another run, pid %ld", dir, holder);
    fatal("--ckpt-dir %s is in use by another run", dir);
}

// 1 when --resume names `dir` or a checkpoint inside it.
static int resumes_from_dir(const char *resume, const char *dir) {
    char checkpoint[4096], real_checkpoint[PATH_MAX], real_dir[PATH_MAX];
    checkpoint_resolve(resume, checkpoint, sizeof checkpoint);
    if (!realpath(checkpoint, real_checkpoint) || !realpath(dir, real_dir)) return 0;
    char *slash = strrchr(real_checkpoint, '/');
    if (slash) *slash = '\0';
    return strcmp(real_checkpoint, real_dir) == 0;
}

static void canonical_path(const char *path, char *out, size_t size);

// A --ckpt-dir inside a checkpoint (a step_N, or step_N.tmp, of a directory that holds checkpoints) would be
// deleted with it when that directory's run prunes it: refused, however the path reaches it (links, "..").
static void check_not_inside_a_checkpoint(const char *dir) {
    char path[PATH_MAX > 4400 ? PATH_MAX : 4400], probe[4500];
    struct stat st;
    if (!realpath(dir, path)) canonical_path(dir, path, sizeof path);  // a link itself resolved too, when it exists
    xsnprintf(probe, sizeof probe, "%s/manifest.txt", path);
    if (stat(probe, &st) == 0)
        fatal("--ckpt-dir %s: it is %s, a checkpoint (it holds a manifest): give the checkpoints a directory of "
              "their own", dir, path);
    const char *is = "it is";  // the directory itself, then each directory above it
    for (char *slash = strrchr(path, '/'); slash && slash != path; slash = strrchr(path, '/'), is = "it is inside") {
        const char *name = slash + 1;
        *slash = '\0';  // path is now the parent of `name`
        int step;
        if (checkpoint_name_kind(name, &step) == CKPT_NAME_OTHER) continue;
        xsnprintf(probe, sizeof probe, "%s/latest", path);
        int holds_checkpoints = stat(probe, &st) == 0;
        xsnprintf(probe, sizeof probe, "%s/%s/manifest.txt", path, name);
        if (holds_checkpoints || stat(probe, &st) == 0)
            fatal("--ckpt-dir %s: %s %s/%s, a checkpoint of the run in %s: pruning that run's checkpoints would "
                  "delete it; give the checkpoints a directory of their own", dir, is, path, name, path);
    }
}

// A run resumed from step S of --ckpt-dir itself may save any step from S+1 to --steps (a signal's save
// included). A step_N there in that range belongs to the run this one branches from (it went on past S):
// a save would replace it, so the branch is refused before it starts, both runs named.
static void check_branch_writes_nothing_existing(const char *dir, const char *resume, int steps) {
    if (!resume || !resumes_from_dir(resume, dir)) return;
    char checkpoint[4096];
    checkpoint_resolve(resume, checkpoint, sizeof checkpoint);
    const char *base = strrchr(checkpoint, '/');
    int from;
    if (checkpoint_name_kind(base ? base + 1 : checkpoint, &from) != CKPT_NAME_STEP) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    int found = 0, first = 0, last = 0;
    while ((e = readdir(d)) != NULL) {
        int step;
        if (checkpoint_name_kind(e->d_name, &step) != CKPT_NAME_STEP || step <= from || step > steps) continue;
        if (!found || step < first) first = step;
        if (!found || step > last) last = step;
        found++;
    }
    closedir(d);
    if (!found) return;
    char names[64];
    if (found == 1) xsnprintf(names, sizeof names, "step_%08d", first);
    else xsnprintf(names, sizeof names, "%d of them, step_%08d to step_%08d", found, first, last);
    fatal("--resume %s --ckpt-dir %s: this run branches from step %d, and %s holds later checkpoints of the run it "
          "branches from (%s), which this run's saves (steps %d to %d) would replace: give the branch its own "
          "--ckpt-dir", resume, dir, from, dir, names, from + 1, steps);
}

// The --ckpt-dir this run made, removed at exit (or at the run's end, when the job serves more runs) while it is
// still empty: a run refused or stopped before its first save leaves no trace. (atexit's callbacks take no
// argument: hence a variable of this file's own.)
static char made_ckpt_dir[4200];
static void remove_made_ckpt_dir(void) {
    if (made_ckpt_dir[0]) rmdir(made_ckpt_dir);
    made_ckpt_dir[0] = 0;
}

// Rank 0 makes the checkpoint directory and locks it, first of all: a second run on the directory is told it
// is in use before its ranks read the checkpoints there, which the first run may be saving (its ranks could
// find different ones).
static void take_checkpoint_dir(Run *run) {
    static int registered;  // atexit's callback, once a process: a job that serves many runs makes many
    const char *dir = run->opts.ckpt_dir;
    struct stat st;
    if (!dir || run->comm.rank != 0) return;
    check_checkpoint_path_length(dir, run->opts.steps, run->comm.world);
    check_not_inside_a_checkpoint(dir);
    if (mkdir(dir, 0755) == 0) {
        xsnprintf(made_ckpt_dir, sizeof made_ckpt_dir, "%s", dir);
        if (!registered++) atexit(remove_made_ckpt_dir);
    } else if (errno != EEXIST) {
        fatal("--ckpt-dir %s: cannot create the directory: %s", dir, strerror(errno));
    }
    if (stat(dir, &st) != 0) fatal("--ckpt-dir %s: %s", dir, strerror(errno));  // a link loop, say
    if (!S_ISDIR(st.st_mode)) fatal("--ckpt-dir %s: not a directory (%s)", dir, file_kind(st.st_mode));
    run->ckpt_lock = lock_checkpoint_dir(dir);
}

// Every rank writes its shard into the checkpoint directory (rank 0 has made it and
// locked it): every rank creates and removes a file of its own in it.
static void check_checkpoint_dir(Run *run) {
    const char *dir = run->opts.ckpt_dir, *resume = run->opts.resume;
    Comm *comm = &run->comm;
    check_checkpoint_path_length(dir, run->opts.steps, comm->world);
    // another run's checkpoints: this run's saves and pruning would replace them
    char latest[4200];
    xsnprintf(latest, sizeof latest, "%s/latest", dir);
    if (access(latest, F_OK) == 0) {
        if (!resume)
            fatal("--ckpt-dir %s already holds another run's checkpoints (%s): continue them with --resume %s, "
                  "or give another directory", dir, latest, dir);
        if (!resumes_from_dir(resume, dir))
            fatal("--ckpt-dir %s already holds another run's checkpoints (%s), and --resume %s is not one of them: "
                  "give an empty --ckpt-dir, or --resume from %s to continue its run", dir, latest, resume, dir);
    }
    check_branch_writes_nothing_existing(dir, resume, run->opts.steps);
    struct stat st;
    comm_metric_max(comm, 0);  // a barrier: the directory exists before anyone looks (take_checkpoint_dir)
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--ckpt-dir %s: not a directory", dir);
    char probe[4200];
    xsnprintf(probe, sizeof probe, "%s/.write_test_rank_%05d", dir, comm->rank);
    check_writable("--ckpt-dir", dir, probe);
}

static void check_log_written(const Run *run) {
    if (ferror(run->log) || fflush(run->log) != 0)
        fatal("--log %s: cannot write: %s", run->opts.log_path, strerror(errno));
}

// Rank 0 opens the log now, so that an unwritable path fails before the model
// is built; its first line follows once the strategy has its name (a preset
// flag may change it), still before training.
static void open_log(Run *run) {
    const TrainOptions *o = &run->opts;
    struct stat st;
    if (stat(o->log_path, &st) == 0 && S_ISFIFO(st.st_mode)) fatal("--log %s: not a regular file (a FIFO)", o->log_path);
    run->log = fopen(o->log_path, o->resume ? "a" : "w");
    if (!run->log) fatal("--log %s: cannot open for writing: %s", o->log_path, strerror(errno));
}

static void write_log_start(Run *run) {
    const TrainOptions *o = &run->opts;
    fprintf(run->log, "{\"start\": true, \"strategy\": \"%s\", \"world_size\": %d, \"steps\": %d, \"resume\": %s}\n",
            run->strategy.name, run->comm.world, o->steps, o->resume ? "true" : "false");
    check_log_written(run);
}

// `path` as an absolute path with its directory resolved (the file itself may
// not exist yet); "" when its directory does not exist.
static void canonical_path(const char *path, char *out, size_t size) {
    char dir[4096], resolved[PATH_MAX];
    const char *slash = strrchr(path, '/');
    xsnprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    if (!realpath(dir, resolved)) {
        out[0] = '\0';
        return;
    }
    snprintf(out, size, "%s/%s", strcmp(resolved, "/") ? resolved : "", slash ? slash + 1 : path);
}

// 1 if both paths name one existing file, however reached (a symbolic or a hard
// link, another spelling): the same device and inode.
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && same_file_stat(&sa, &sb);
}

// The run's files, by flag: the outputs first (the first `outputs` of them), then
// the inputs. NULL paths are absent.
typedef struct {
    const char *flag;
    char path[4200];
} RunFile;

// The run's files, its outputs first (*outputs of them): the models' PATH.tmp too, which is written and then
// renamed over PATH (replace_begin in errors.h).
static int run_files(const TrainOptions *o, RunFile *files, int *outputs) {
    enum { OUTPUTS = 7 };
    const char *given[][3] = {  // flag, path, suffix
        {"--out-model", o->out_model, ""}, {"--out-model", o->out_model, ".tmp"},
        {"--out-model-ema", o->out_model_ema, ""}, {"--out-model-ema", o->out_model_ema, ".tmp"},
        {"--log", o->log_path, ""}, {"--trace", o->trace_prefix, ".json"}, {"--trace", o->trace_prefix, ".tsv"},
        {"--model", o->model_path, ""}, {"--data", o->data_dir, "/train.bin"}, {"--data", o->data_dir, "/val.bin"}};
    int n = 0;
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
        if (i == OUTPUTS) *outputs = n;
        if (!given[i][1]) continue;
        files[n].flag = given[i][0];
        xsnprintf(files[n++].path, sizeof files->path, "%s%s", given[i][1], given[i][2]);
    }
    return n;
}

// Refuses output `path` (flag `flag`) when it is, by its identity (a link, another spelling), one of the
// files of a checkpoint: with depth 1, any file of the checkpoint `dir`; with depth 2, `dir`'s latest or a
// file of its step_N checkpoints (a --ckpt-dir, where other files are the user's). `whose` says whose they are.
static void check_not_among(const char *flag, const char *path, const char *dir, int depth, const char *whose) {
    struct stat out;
    if (stat(path, &out) != 0) return;  // a new file is none of them
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char sub[4400];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (depth > 1 && strcmp(e->d_name, "latest") != 0 && strncmp(e->d_name, "step_", 5) != 0) continue;
        xsnprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(sub, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && depth > 1) check_not_among(flag, path, sub, depth - 1, whose);
        else if (S_ISREG(st.st_mode) && same_file_stat(&st, &out)) {
            closedir(d);
            fatal("%s %s: that is %s, a file of %s: give the output a path of its own", flag, path, sub, whose);
        }
    }
    closedir(d);
}

// No output (--out-model, --out-model-ema, --log, --trace) may be another of the
// run's files, by its path or, once it exists, by its identity (links), which
// writing it would destroy: another output, the data, the model it starts from,
// the checkpoint it resumes from (any file in it, or where it is to be), or what
// the checkpoints keep in --ckpt-dir (latest and the step_N directories; a save
// replaces and prunes them).
static void check_outputs_are_their_own(const TrainOptions *o) {
    RunFile files[10];
    int outputs = 0, n = run_files(o, files, &outputs);
    char mine[4400], other[4400], dir[4400], resumed[4096] = "", resumed_dir[PATH_MAX] = "", resumed_from[8400];
    if (o->ckpt_dir) canonical_path(o->ckpt_dir, dir, sizeof dir);
    if (o->resume) {
        checkpoint_resolve(o->resume, resumed, sizeof resumed);
        if (!realpath(resumed, resumed_dir)) resumed_dir[0] = '\0';
        xsnprintf(resumed_from, sizeof resumed_from, "the checkpoint --resume %s reads (%s)", o->resume, resumed);
    }
    if (o->ckpt_dir && resumed_dir[0]) {  // the new checkpoints would land inside the one the run reads
        char ckpt_real[PATH_MAX];
        size_t in = strlen(resumed_dir);
        if (realpath(o->ckpt_dir, ckpt_real) && strncmp(ckpt_real, resumed_dir, in) == 0 &&
            (ckpt_real[in] == '/' || ckpt_real[in] == '\0'))
            fatal("--ckpt-dir %s: it is %s: give the checkpoints a directory of their own (or the one that holds "
                  "the resumed checkpoint, to continue its run there)", o->ckpt_dir, resumed_from);
    }
    for (int i = 0; i < outputs; i++) {
        // Through a link, the early check would write the target and the final rename replace the link itself
        // (a dangling one: whatever file takes the target's name later); an output is its own file.
        struct stat st;
        char target[4096];
        if (lstat(files[i].path, &st) == 0 && S_ISLNK(st.st_mode)) {
            ssize_t n = readlink(files[i].path, target, sizeof target - 1);
            target[n > 0 ? n : 0] = '\0';
            fatal("%s %s: a symbolic link (to %s): an output is never written through a link; give the file's own "
                  "path", files[i].flag, files[i].path, target);
        }
    }
    for (int i = 0; i < outputs; i++) {
        canonical_path(files[i].path, mine, sizeof mine);
        size_t in = strlen(resumed_dir);
        if (in && strncmp(mine, resumed_dir, in) == 0 && mine[in] == '/')
            fatal("%s %s: it is inside %s: give the output a path of its own", files[i].flag, files[i].path,
                  resumed_from);
        if (o->resume) {
            check_not_among(files[i].flag, files[i].path, resumed, 1, resumed_from);
            check_not_among(files[i].flag, files[i].path, o->resume, 2, "the checkpoints --resume reads from");  // latest
        }
        if (o->ckpt_dir) check_not_among(files[i].flag, files[i].path, o->ckpt_dir, 2, "the checkpoints of --ckpt-dir");
        for (int j = 0; j < n && mine[0]; j++) {
            if (strcmp(files[j].flag, files[i].flag) == 0) continue;
            canonical_path(files[j].path, other, sizeof other);
            if (strcmp(mine, other) == 0 || same_file(files[i].path, files[j].path))
                fatal("%s %s: that is the file of %s %s: give the output a path of its own", files[i].flag,
                      files[i].path, files[j].flag, files[j].path);
        }
        size_t len = o->ckpt_dir ? strlen(dir) : 0;
        const char *inside = len && mine[0] && strncmp(mine, dir, len) == 0 && mine[len] == '/' ? mine + len + 1 : "";
        if (strncmp(inside, "latest", 6) == 0 || strncmp(inside, "step_", 5) == 0)
            fatal("%s %s: it is one of the checkpoints' own files in --ckpt-dir %s (latest, step_N)", files[i].flag,
                  files[i].path, o->ckpt_dir);
    }
}

// Every output is known to be writable before the first step.
static void check_outputs(Run *run) {
    const TrainOptions *o = &run->opts;
    char path[4200];
    if (o->ckpt_dir) check_checkpoint_dir(run);
    if (run->comm.rank != 0) return;
    check_outputs_are_their_own(o);
    if (o->out_model) check_replaceable("--out-model", o->out_model);
    if (o->out_model_ema) check_replaceable("--out-model-ema", o->out_model_ema);
    if (o->trace_prefix) {
        xsnprintf(path, sizeof path, "%s.json", o->trace_prefix);
        check_writable("--trace", o->trace_prefix, path);
        xsnprintf(path, sizeof path, "%s.tsv", o->trace_prefix);
        check_writable("--trace", o->trace_prefix, path);
    }
    if (o->log_path) open_log(run);
}

// The vocabulary the --data directory was prepared with (DIR/tokenizer.txt):
// a --config model takes it when --vocab is left out, and a model of another
// size is refused, so that byte data never trains a V = 50257 model by accident.
static void match_data_vocab(TrainOptions *o, const GPT2Config *model) {
    struct stat st;
    if (strlen(o->data_dir) + sizeof "/train.bin" > 4096)  // the shards' paths (setup's buffers) must fit
        fatal("--data: a path of %zu characters; the shards' paths in it must stay under 4,096", strlen(o->data_dir));
    if (stat(o->data_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        fatal("--data %s: %s; make one with build/prepare --text FILE --tokenizer byte --out %s", o->data_dir,
              stat(o->data_dir, &st) != 0 ? "no such directory" : "not a directory", o->data_dir);
    char tokenizer[64];
    int data_vocab = data_dir_vocab(o->data_dir, tokenizer, sizeof tokenizer);
    if (data_vocab == 0) return;  // shards made by other means: the model's vocabulary is checked per token
    if (o->config_name && o->vocab_size == 0) o->vocab_size = data_vocab;
    int vocab = model ? model->vocab_size : o->vocab_size;
    if (vocab != data_vocab)
        fatal("%s %d, but --data %s was prepared with the %s tokenizer, V = %d: %s", model ? "the --model has V =" : "--vocab",
              vocab, o->data_dir, tokenizer, data_vocab,
              model ? "give a model of that vocabulary" : "leave --vocab out to take the data's");
}

static void setup(Run *run) {
    TrainOptions *o = &run->opts;
    GPT2Config config;
    if (o->model_path) gpt2_checkpoint_read_config(o->model_path, &config);
    match_data_vocab(o, o->model_path ? &config : NULL);
    if (!o->model_path && gpt2_config_preset(o->config_name, o->vocab_size, &config) != 0)
        fatal("--config: unknown preset '%s' (use d2, d4, d6 or d12)", o->config_name);
    if (o->seq > config.max_seq_len) fatal("--seq %d exceeds the model's maximum %d", o->seq, config.max_seq_len);
    int world = run->comm.world, ranks = world * run->as_ranks;  // --as-ranks N: the rows of N ranks
    if (o->batch % ranks != 0)
        fatal("--batch %d is not divisible by the number of ranks (%d%s)", o->batch, ranks,
              run->as_ranks > 1 ? ", --as-ranks" : "");
    if (o->batch / ranks % o->grad_accum != 0)
        fatal("--grad-accum %d: each rank's %d rows (--batch %d over %d ranks) do not split into %d micro-batches",
              o->grad_accum, o->batch / ranks, o->batch, ranks, o->grad_accum);
    take_checkpoint_dir(run);  // after the checks every rank makes alike, before any rank reads a checkpoint

    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", o->data_dir);
    loader_init(&run->train, path, config.vocab_size, o->batch, o->seq, run->comm.rank, world);
    if (strcmp(o->data_order, "llmc") == 0) loader_use_llmc_order(&run->train);
    snprintf(path, sizeof path, "%s/val.bin", o->data_dir);
    struct stat st;
    run->have_val = o->eval_every > 0 && stat(path, &st) == 0;
    if (o->eval_every > 0 && !run->have_val) fatal("%s: missing, but --eval-every asks for validation", path);
    if (run->have_val) loader_init(&run->val, path, config.vocab_size, o->batch, o->seq, run->comm.rank, world);
    if (!ranks_agree(&run->comm, run->plugin->name, run->flags, run->given, run->num_flags, o, &run->train,
                     run->have_val ? &run->val : NULL)) {
        // the --ckpt-dir rank 0 made goes first: mpirun may kill it as soon as another rank has exited
        remove_made_ckpt_dir();
        comm_metric_max(&run->comm, 0);  // a barrier
        fflush(stdout);
        exit(1);
    }
    check_outputs(run);

    gpt2_init(&run->model, config, o->batch / ranks / o->grad_accum, o->seq, o->recompute,
              o->fused_attention ? ATTENTION_KEEPS_LOGSUMEXP : ATTENTION_KEEPS_PROBABILITIES,
              o->fused_classifier ? CLASSIFIER_FUSED : CLASSIFIER_KEEPS_PROBABILITIES, &run->mem);
    run->model.grad_accum = o->grad_accum;
    run->settings = (RunSettings){.offload_optimizer = o->offload_optimizer, .ema_decay = o->ema};
    run->model.dropout = o->dropout;
    run->model.dropout_seed = o->seed;
    options_dtypes(o, &run->model.param_dtype, &run->model.grad_dtype);
    trace_init(&run->trace, o->trace_prefix != NULL);
    trace_attach_comm(&run->trace, &run->comm);  // collectives on a lane of their own, from start to completion
    StrategyContext ctx = {
        .model = &run->model, .comm = &run->comm, .mem = &run->mem,
        .source = {.checkpoint_path = o->model_path, .seed = o->seed},
        .options = run->plugin->options,
        .quiet = o->quiet,
        .accum_mode = strcmp(o->accum_mode, "no-sync") == 0 ? ACCUM_NO_SYNC : ACCUM_SYNC_EACH,
        .run = &run->settings,
    };
    if (run->plugin->units) strategy_group_units(&ctx, *run->plugin->units);
    run->strategy = run->plugin->init(&ctx);
    if (run->comm.rank == 0 && !o->quiet)
        printf("%s on %s: %d rank(s), L=%d C=%d NH=%d V=%d, %zu parameters, global batch %d x %d "
               "(%d micro-batch(es) of %d x %d per rank); %s parameters, %s gradients; %d thread(s) per rank "
               "(%d cores, %d rank(s) on this node)\n",
               run->strategy.name, device_name(), world, config.num_layers, config.channels, config.num_heads,
               config.vocab_size, run->model.layout.num_params, o->batch, o->seq, o->grad_accum, run->model.B,
               o->seq, dtype_name(run->model.param_dtype), dtype_name(run->model.grad_dtype), run->threads, run->cores,
               run->comm.local_size);
    fflush(stdout);  // said before the first step, which may take long
    run->first_step = 1;
    if (o->resume) {
        CkptManifest m;
        double t0 = timer_now();
        checkpoint_load(o->resume, &run->strategy, &run->model.layout, &run->comm, o->ema, o->precision, &m);
        if (m.ema_decay > 0 && o->ema == 0 && run->comm.rank == 0)
            fprintf(stderr, "shardlab: note: the checkpoint's EMA weights (--ema %s) are left unread: this run "
                            "keeps none, and its own checkpoints will carry none\n", ckpt_decay_text(m.ema_decay).text);
        double load_s = comm_metric_max(&run->comm, timer_now() - t0);
        run->first_step = m.step + 1;
        if (m.step >= STEPS_MAX && m.step > o->steps)
            fatal("--resume %s: the checkpoint is at step %d, the last a run reaches (--steps is at most %d): there is "
                  "nothing to train on from it", o->resume, m.step, STEPS_MAX);
        if (m.step > o->steps)
            fatal("--resume %s: the checkpoint is at step %d, past --steps %d; give --steps above %d to train on",
                  o->resume, m.step, o->steps, m.step);
        if (o->dropout > 0 && m.seed != o->seed)
            fatal("--resume: the checkpoint was trained with --seed %llu, this run gives %llu: --dropout's masks "
                  "follow the seed, so the run would not continue the same training (give --seed %llu)",
                  (unsigned long long)m.seed, (unsigned long long)o->seed, (unsigned long long)m.seed);
        if (m.data_position > run->train.num_tokens) {
            char dir[4096];
            checkpoint_resolve(o->resume, dir, sizeof dir);
            fatal("%s/manifest.txt: data_position %llu is past the end of %s/train.bin (%zu tokens)", dir,
                  (unsigned long long)m.data_position, o->data_dir, run->train.num_tokens);
        }
        if (run->train.sample_order) loader_skip_batches(&run->train, (size_t)m.step);  // a function of the step
        else run->train.position = m.data_position;
        if (o->timeline_step && o->timeline_step <= m.step)
            fatal("--timeline-step %d: the run resumes after it, at step %d (give a step from %d on)", o->timeline_step,
                  m.step + 1, m.step + 1);
        if (run->comm.rank == 0 && !o->quiet)
            printf("resumed from %s in %.2f s: step %d, written by %s on %d rank(s)\n", o->resume, load_s, m.step,
                   m.strategy, m.world_size);
        if (run->comm.rank == 0 && m.step == o->steps)  // said even with --quiet: the run does nothing
            printf("nothing left to train: %s is at step %d, which is --steps%s\n", o->resume, m.step,
                   m.step < STEPS_MAX ? "; give --steps above it to train on" : ", the last a run reaches");
        ckpt_manifest_free(&m);
    }
    if (run->log) write_log_start(run);  // once the run is known to go ahead: a refused resume leaves the log alone
}

// *norm: the gradient's global norm before clipping (NAN without --grad-clip).
static void train_step(Run *run, int step, double *loss, double *step_s, double *norm) {
    Strategy *s = &run->strategy;
    CommStats before = run->comm.stats, across_before = run->comm.across;
    run->trace.step = step;
    int keep_timeline = run->opts.timeline_step == 0 || run->opts.timeline_step == step;
    if (keep_timeline) {  // a new one each step, so that the last step trained is the one kept
        mem_timeline_free(&run->timeline);
        mem_timeline_start(&run->timeline, &run->mem);
    }
    double t0 = timer_now();
    loader_next_batch(&run->train);
    double *loss_sum = xcalloc((size_t)run->as_ranks, sizeof *loss_sum);
    OffloadEarly early = {.config = adamw_config(lr_schedule_at(&run->schedule, step), run->opts.weight_decay)};
    int K = run->opts.grad_accum;
    for (int micro = 0; micro < K; micro++) {
        int last = micro == K - 1;
        for (int r = 0; r < run->as_ranks; r++) {  // one rank's rows, or each of --as-ranks N's in rank order
            set_micro_batch(run, &run->train, r * K + micro, step);
            forward_pass(&run->model, s, &run->trace, 1);
            if (last && r == run->as_ranks - 1) offload_early_begin(&run->settings, run->opts.grad_clip, &early);
            backward_pass(&run->model, s, &run->trace, last);
            loss_sum[r] += run->model.mean_loss;
        }
    }
    finish_pass(&run->model, s, &run->trace);
    double t_optim = timer_now();
    CommStats before_optim = run->comm.stats;
    double tr = trace_begin(&run->trace);
    test_hook_optim_phase(&run->test_hooks, run->comm.rank);
    *norm = optimizer_pass(&run->model, s, &run->comm, run->opts.grad_clip, early.config, &run->settings);
    trace_end(&run->trace, tr, "optim", "optimizer");
    mem_set_phase(&run->mem, PHASE_SETUP, -1);
    if (keep_timeline) {
        mem_timeline_stop(&run->timeline, &run->mem);
        run->summary.timeline_step = step;
        memcpy(run->summary.timeline_start, run->timeline.start, sizeof run->timeline.start);
    }
    double t1 = timer_now();
    run->summary.comm_last_step = comm_stats_diff(&run->comm.stats, &before);
    run->summary.across_last_step = comm_stats_diff(&run->comm.across, &across_before);
    // each second of the step counts once: communication waited for inside the
    // optimizer phase (the norm's all-reduce, ZeRO-1/2's all-gather) is communication;
    // offloaded updates begun inside the backward are optimizer time
    double comm_s = comm_seconds(&run->summary.comm_last_step);
    CommStats in_optim = comm_stats_diff(&run->comm.stats, &before_optim);
    double optim_s = (t1 - t_optim) - comm_seconds(&in_optim) + early.host_s;
    run->summary.step_s += t1 - t0;
    run->summary.optim_s += optim_s;
    run->summary.comm_wait_s += comm_s;
    run->summary.compute_s += (t1 - t0) - optim_s - comm_s;
    for (int r = 0; r < run->as_ranks; r++) loss_sum[r] /= K;
    *loss = mean_over_ranks(run, loss_sum);
    free(loss_sum);
    *step_s = comm_metric_max(&run->comm, t1 - t0);  // a step ends when its slowest rank does
}

// The strategy's own flags as JSON members: "--reshard-after-forward 0" becomes
// "reshard_after_forward": 0.
static void write_strategy_options(FILE *f, const StrategyPlugin *plugin) {
    for (int i = 0; i < plugin->num_flags; i++) {
        const CliOption *flag = &plugin->flags[i];
        char key[64];
        snprintf(key, sizeof key, "%s", flag->flag + 2);
        for (char *c = key; *c; c++)
            if (*c == '-') *c = '_';
        fprintf(f, "%s\"%s\": ", i ? ", " : "", key);
        switch (flag->kind) {
        case CLI_INT: case CLI_SWITCH: fprintf(f, "%d", *(const int *)flag->dest); break;
        case CLI_UINT64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)flag->dest); break;
        case CLI_FLOAT: fprintf(f, "%g", *(const float *)flag->dest); break;
        case CLI_STRING: {
            const char *text = *(const char *const *)flag->dest;
            fprintf(f, text ? "\"%s\"" : "null", text);
            break;
        }
        }
    }
}

static void write_counter(FILE *f, const CommStats *stats) {
    fprintf(f, "{");
    for (int i = 0; i < COMM_NUM_OPS; i++) {
        const CommCounter *c = &stats->ops[i];
        fprintf(f, "%s\"%s\": {\"calls\": %llu, \"elements\": %llu, \"bytes_sent\": %llu, "
                   "\"bytes_recv\": %llu, \"node_calls\": %llu, \"node_bytes_in\": %llu, "
                   "\"node_bytes_out\": %llu, \"seconds\": %.6f}",
                i ? ", " : "", comm_op_names[i], (unsigned long long)c->calls,
                (unsigned long long)c->elements, (unsigned long long)c->bytes_sent,
                (unsigned long long)c->bytes_recv, (unsigned long long)c->node_calls,
                (unsigned long long)c->node_bytes_in, (unsigned long long)c->node_bytes_out, c->seconds);
    }
    fprintf(f, "}");
}

// A rank's kept step as JSON members: "timeline" (the bytes of each category as
// it began, then its events, each [phase, unit, category, bytes, total after]) and
// "peak_moment" (when the step's total was highest, and what each category held
// then); null without a kept step.
static void write_timeline(FILE *f, const MemTimeline *t, int step) {
    if (step == 0) {
        fprintf(f, ", \"timeline\": null, \"peak_moment\": null");
        return;
    }
    fprintf(f, ", \"timeline\": {\"step\": %d, \"start\": {", step);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) fprintf(f, "%s\"%s\": %" PRIu64, k ? ", " : "", mem_category_names[k], t->start[k]);
    fprintf(f, "}, \"events\": [");
    for (size_t i = 0; i < t->count; i++) {
        const MemEvent *e = &t->events[i];
        fprintf(f, "%s[\"%s\", %d, \"%s\", %lld, %" PRIu64 "]", i ? ", " : "", mem_phase_names[e->phase], e->unit,
                mem_category_names[e->category], e->bytes, e->total);
    }
    uint64_t total, held[MEM_NUM_CATEGORIES];
    long at = mem_timeline_peak(t, &total, held);
    const MemEvent *peak = at >= 0 ? &t->events[at] : NULL;
    fprintf(f, "]}, \"peak_moment\": {\"step\": %d, \"bytes\": %" PRIu64 ", \"event\": %ld, \"phase\": \"%s\", "
               "\"unit\": %d, \"held\": {", step, total, at, mem_phase_names[peak ? peak->phase : PHASE_SETUP],
            peak ? peak->unit : -1);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        fprintf(f, "%s\"%s\": %" PRIu64, k ? ", " : "", mem_category_names[k], held[k]);
    fprintf(f, "}}");
}

// `text` as a JSON string: quotes, backslashes and control characters escaped.
static void write_json_text(FILE *f, const char *text) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

static void write_summary(Run *run, double tokens_per_s) {
    run->summary.mem = run->mem;
    run->summary.rss_peak_bytes = mem_rss_peak_bytes();
    run->summary.reserved_peak_bytes = device_reserved(&run->mem).peak;
    run->summary.comm_total = run->comm.stats;
    size_t *counts = NULL, *event_bytes = NULL;
    RankSummary *all = comm_metric_gather(&run->comm, &run->summary, sizeof run->summary, &counts);
    MemEvent *all_events = comm_metric_gather(&run->comm, run->timeline.events,
                                              run->timeline.count * sizeof(MemEvent), &event_bytes);
    if (run->comm.rank != 0) return;
    free(counts);
    if (!run->log) {
        free(all), free(all_events), free(event_bytes);
        return;
    }
    MemEvent *events = all_events;
    const GPT2Config *c = &run->model.layout.config;
    FILE *f = run->log;
    fprintf(f, "{\"summary\": true, \"strategy\": \"%s\", \"device\": \"%s\", \"world_size\": %d, \"config\": "
               "{\"max_seq_len\": %d, \"vocab_size\": %d, \"padded_vocab_size\": %d, \"num_layers\": %d, "
               "\"num_heads\": %d, \"channels\": %d, \"num_params\": %zu, \"batch\": %d, \"seq\": %d, "
               "\"steps\": %d, \"lr\": %g, \"seed\": %llu, \"preset\": \"%s\", \"model\": \"%s\", "
               "\"grad_clip\": %g, \"lr_schedule\": \"%s\", \"warmup\": %d, \"min_lr\": %g, \"recompute\": %d, "
               "\"fused_attention\": %d, \"fused_classifier\": %d, "
               "\"data_order\": \"%s\", \"grad_accum\": %d, \"accum_mode\": \"%s\", \"precision\": \"%s\", "
               "\"reduce_dtype\": \"%s\", \"dropout\": %g, \"ema\": %g, \"offload_optimizer\": %d}, "
               "\"strategy_options\": {",
            run->strategy.name, device_name(), run->comm.world, c->max_seq_len, c->vocab_size, c->padded_vocab_size,
            c->num_layers, c->num_heads, c->channels, run->model.layout.num_params, run->opts.batch,
            run->opts.seq, run->opts.steps, run->opts.lr, (unsigned long long)run->opts.seed,
            run->opts.config_name ? run->opts.config_name : "", run->opts.model_path ? run->opts.model_path : "",
            run->opts.grad_clip, run->opts.lr_schedule, run->opts.warmup, run->opts.min_lr, run->opts.recompute,
            run->opts.fused_attention, run->opts.fused_classifier, run->opts.data_order, run->opts.grad_accum, run->opts.accum_mode,
            dtype_name(run->model.param_dtype), dtype_name(run->model.grad_dtype), run->opts.dropout, run->opts.ema,
            run->opts.offload_optimizer);
    write_strategy_options(f, run->plugin);
    fprintf(f, "}, \"blocks_of_unit\": [");  // 0 for the embeddings' unit and the head
    for (int u = 0; u < run->model.layout.num_units; u++)
        fprintf(f, "%s%d", u ? ", " : "", run->model.layout.unit_num_layers[u]);
    // rank 0's engine, which writes the summary (the ranks agree on it: run/agree.c); a GPU's are cuBLAS's
    ProductEngine products = {"cuBLAS", device_name(), "cuBLAS", "cuda streams", .kernels = "cuBLAS",
                              .bf16_kernels = "cuBLAS"};
    if (strcmp(device_name(), "cpu") == 0) products = product_engine();
    fprintf(f, "], \"products\": {\"engine\": ");
    write_json_text(f, products.engine);
    fprintf(f, ", \"kernels\": ");
    write_json_text(f, products.kernels);
    fprintf(f, ", \"isa\": ");
    write_json_text(f, products.isa);
    fprintf(f, ", \"chosen_by\": ");
    write_json_text(f, products.chosen_by);
    fprintf(f, ", \"bf16_kernels\": ");
    write_json_text(f, products.bf16_kernels);
    fprintf(f, ", \"parallel\": \"%s\", \"threads\": %d}", products.parallel, omp_get_max_threads());
    fprintf(f, ", \"last_step\": %d, \"stopped_by_signal\": %s, \"tokens_per_s\": %.1f, \"cores_on_node\": %d, "
               "\"ranks_on_node\": %d, \"ranks\": [",
            run->last_step, run->stopped_by_signal ? "true" : "false", tokens_per_s, threads_cores_on_node(),
            run->comm.local_size);
    for (int r = 0; r < run->comm.world; r++) {
        const RankSummary *s = &all[r];
        fprintf(f, "%s{\"rank\": %d, \"mem\": {", r ? ", " : "", r);
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
            fprintf(f, "%s\"%s\": {\"current\": %" PRIu64 ", \"peak\": %" PRIu64 "}", k ? ", " : "",
                    mem_category_names[k], s->mem.current[k], s->mem.peak[k]);
        fprintf(f, "}, \"peak_bytes\": %" PRIu64 ", \"host_peak_bytes\": %" PRIu64 ", \"reserved_peak_bytes\": %" PRIu64 ", "
                   "\"rss_peak_bytes\": %zu, \"comm\": ",
                s->mem.total_peak, s->mem.host_peak, s->reserved_peak_bytes, s->rss_peak_bytes);
        write_counter(f, &s->comm_total);
        fprintf(f, ", \"comm_last_step\": ");
        write_counter(f, &s->comm_last_step);
        fprintf(f, ", \"comm_across_last_step\": ");
        write_counter(f, &s->across_last_step);
        fprintf(f, ", \"time\": {\"step_s\": %.6f, \"compute_s\": %.6f, \"comm_wait_s\": %.6f, \"optim_s\": %.6f}, "
                   "\"minor_faults\": %ld, \"last_grad_norm\": ", s->step_s, s->compute_s, s->comm_wait_s, s->optim_s,
                s->minor_faults);
        if (isnan(s->last_grad_norm)) fprintf(f, "null");
        else fprintf(f, "%.17g", s->last_grad_norm);
        MemTimeline timeline = {.events = events, .count = event_bytes[r] / sizeof(MemEvent)};
        memcpy(timeline.start, s->timeline_start, sizeof timeline.start);
        write_timeline(f, &timeline, s->timeline_step);
        events += timeline.count;
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    free(all);
    free(all_events);
    free(event_bytes);
}

// The final weights (--out-model), or with `ema` their EMA (--out-model-ema), as
// an llm.c model file at `path`.
static void write_final_model(Run *run, const char *path, int ema) {
    const GPT2Layout *layout = &run->model.layout;
    float *flat = NULL;
    if (run->comm.rank == 0) flat = xmalloc(layout->num_params * sizeof(float));
    if (ema) run->strategy.swap_ema(run->strategy.state);
    run->strategy.gather_full_model(run->strategy.state, flat);
    if (ema) run->strategy.swap_ema(run->strategy.state);
    if (run->comm.rank == 0) {
        gpt2_checkpoint_write(path, &layout->config, flat, layout->num_params);
        free(flat);
    }
}

// Where a run that stops on a bad step can continue from, for its message:
// " (the last good checkpoint is DIR/step_N)", or why there is none.
static const char *last_good_checkpoint(const Run *run, char *said, size_t size) {
    const TrainOptions *o = &run->opts;
    char latest[4200], dir[4096];
    if (o->ckpt_dir) xsnprintf(latest, sizeof latest, "%s/latest", o->ckpt_dir);
    if (o->ckpt_dir && access(latest, F_OK) == 0) {
        checkpoint_resolve(o->ckpt_dir, dir, sizeof dir);
        snprintf(said, size, " (the last good checkpoint is %s)", dir);
    } else if (o->resume) {
        snprintf(said, size, " (no checkpoint saved since the one resumed from, %s)", o->resume);
    } else {
        snprintf(said, size, "%s", o->ckpt_dir ? " (no checkpoint was saved before it)" : "");
    }
    return said;
}

int train_main(int argc, char **argv, const StrategyPlugin *plugin) {
    Run run;
    memset(&run, 0, sizeof run);
    run.plugin = plugin;
    run.ckpt_lock = -1;
    run.as_ranks = 1;
    // static: the waiting thread reads it as long as the process lives, past this function's return
    static StopSignals stop_signals;
    stop_signals_block();
    comm_init(&run.comm, &argc, &argv);
    stop_signals_start(&stop_signals);
    atomic_store(&stop_signals.rank, run.comm.rank);
    run.threads = threads_configure(run.comm.local_size, &run.cores);
    // Each rank parses its own command line, silently. The job's outcome is the
    // worst of them (ERROR over HELP over RUN: a rank started with other flags must
    // not leave the others waiting), and the first rank with that outcome says why.
    run.num_flags = options_flags(&run.opts, plugin, run.flags);
    OptionsResult parsed = options_parse(&run.opts, run.flags, run.num_flags, plugin, argc, argv, 0, run.given);
    int worst = (int)comm_metric_max(&run.comm, parsed);
    if (worst != OPTIONS_RUN) {
        int speaker = -(int)comm_metric_max(&run.comm, -((int)parsed == worst ? run.comm.rank : run.comm.world));
        if (run.comm.rank == speaker) {
            run.num_flags = options_flags(&run.opts, plugin, run.flags);
            options_parse(&run.opts, run.flags, run.num_flags, plugin, argc, argv, 1, run.given);
        }
        comm_finalize(&run.comm);
        return worst == OPTIONS_HELP ? 0 : 1;
    }
    if (plugin->as_ranks && *plugin->as_ranks > 0) {  // the threads a rank of N on this node would have
        run.as_ranks = *plugin->as_ranks;
        run.threads = threads_configure(run.comm.local_size * run.as_ranks, &run.cores);
    }
    // ranks compare what a flag resolves to: --reduce-dtype left out is the precision
    if (!run.opts.reduce_dtype) run.opts.reduce_dtype = run.opts.precision;
    if (run.comm.rank == 0 && run.opts.warmup > run.opts.steps)
        fprintf(stderr, "shardlab: warning: --warmup %d is longer than --steps %d: the learning rate rises to %.3g at "
                        "the last step and never reaches --lr %g\n", run.opts.warmup, run.opts.steps,
                run.opts.lr * run.opts.steps / run.opts.warmup, run.opts.lr);
    if (strcmp(device_name(), "cuda") == 0) {  // the CUDA build: one GPU per rank, or ranks sharing one
        device_init(run.comm.local_rank);
        comm_use_device_buffers(&run.comm, device_count());
    }
    setup(&run);
    const TrainOptions *o = &run.opts;
    run.schedule = (LrSchedule){.kind = strcmp(o->lr_schedule, "cosine") == 0 ? LR_COSINE : LR_CONSTANT,
                                .lr = o->lr, .min_lr = o->min_lr, .warmup = o->warmup, .steps = o->steps};
    double tokens_per_step = (double)o->batch * o->seq, total_s = 0;
    int steps_run = 0;
    CkptSaveOptions save = {.dir = o->ckpt_dir, .full = o->save_full, .keep = o->keep, .ema = o->ema,
                            .last_step = o->steps, .precision = o->precision};
    test_hooks_init(&run.test_hooks, o->test_nan_at);
    save.pause_mid_save_s = run.test_hooks.save_pause_s;
    run.summary.last_grad_norm = NAN;
    run.last_step = run.first_step - 1;
    long faults_before = minor_faults_so_far();
    for (int step = run.first_step; step <= o->steps; step++) {
        double loss, step_s, norm;
        char said[4200];
        train_step(&run, step, &loss, &step_s, &norm);
        run.summary.last_grad_norm = norm;
        total_s += step_s;
        steps_run++;
        loss = test_hook_loss(&run.test_hooks, step, loss);
        // every rank has the same loss and norm: all stop, and the message is printed once
        if (!isfinite(loss))
            fatal("step %d: loss is %g; stopping without saving%s", step, loss, last_good_checkpoint(&run, said, sizeof said));
        if (o->grad_clip > 0 && !isfinite(norm))
            fatal("step %d: the gradient norm is %g; stopping without saving%s", step, norm,
                  last_good_checkpoint(&run, said, sizeof said));
        // any rank signalled (during this step, or before the first): all stop together
        int stop = comm_metric_max(&run.comm, stop_signals_take(&stop_signals)) > 0;
        if (o->ckpt_dir && ((o->save_every && step % o->save_every == 0) || stop || step == o->steps)) {
            double t0 = timer_now();
            checkpoint_save(&save, &run.strategy, &run.model.layout, &run.comm, step, run.train.position, o->seed);
            if (run.comm.rank == 0 && !o->quiet)
                printf("saved %s/step_%08d in %.2f s\n", o->ckpt_dir, step, timer_now() - t0);
        }
        int eval = !stop && run.have_val && (step % o->eval_every == 0 || step == o->steps);
        double val_loss = eval ? evaluate(&run, 0) : NAN;
        double val_loss_ema = eval && o->eval_ema ? evaluate(&run, 1) : NAN;
        run.last_step = step;
        if (run.comm.rank == 0 && run.log) {  // the step a signal stopped is logged too
            // every number as many digits as read back to the same double: "bit for bit" compares bits
            fprintf(run.log, "{\"step\": %d, \"loss\": %.17g, \"val_loss\": ", step, loss);
            if (eval) fprintf(run.log, "%.17g", val_loss);
            else fprintf(run.log, "null");
            if (o->eval_ema && eval) fprintf(run.log, ", \"val_loss_ema\": %.17g", val_loss_ema);
            else if (o->eval_ema) fprintf(run.log, ", \"val_loss_ema\": null");
            fprintf(run.log, ", \"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"lr\": %.9g, \"grad_norm\": ",
                    tokens_per_step / step_s, 1e3 * step_s, lr_schedule_at(&run.schedule, step));
            if (isnan(norm)) fprintf(run.log, "null}\n");
            else fprintf(run.log, "%.17g}\n", norm);
            check_log_written(&run);
        }
        if (run.comm.rank == 0 && !o->quiet) {
            double eta = total_s / steps_run * (o->steps - step);
            printf("step %4d/%d | loss %.4f | %8.0f tok/s | %7.1f ms | ETA %.1f s", step, o->steps,
                   loss, tokens_per_step / step_s, 1e3 * step_s, eta);
            if (eval) printf(" | val %.4f", val_loss);
            if (eval && o->eval_ema) printf(" | val ema %.4f", val_loss_ema);
            printf("\n");
            fflush(stdout);
        }
        if (stop) {
            run.stopped_by_signal = 1;
            if (run.comm.rank == 0)
                printf("stopped by a signal after step %d of %d%s%s\n", step, o->steps,
                       o->ckpt_dir ? "; checkpoint saved in " : "", o->ckpt_dir ? o->ckpt_dir : "");
            break;
        }
    }
    run.summary.minor_faults = minor_faults_so_far() - faults_before;
    double tokens_per_s = total_s > 0 ? tokens_per_step * steps_run / total_s : 0;
    write_summary(&run, tokens_per_s);  // before the final gather, which is not training
    if (run.log) check_log_written(&run);
    if (o->out_model) write_final_model(&run, o->out_model, 0);
    if (o->out_model_ema) write_final_model(&run, o->out_model_ema, 1);
    if (o->trace_prefix) trace_write(&run.trace, &run.comm, o->trace_prefix, &run.timeline);
    if (run.log) xfclose(run.log, o->log_path);
    run.strategy.destroy(run.strategy.state);
    gpt2_free(&run.model, &run.mem);
    loader_free(&run.train);
    if (run.have_val) loader_free(&run.val);
    trace_free(&run.trace);
    mem_timeline_free(&run.timeline);
    if (run.ckpt_lock >= 0) close(run.ckpt_lock);  // unlocks --ckpt-dir
    remove_made_ckpt_dir();
    comm_finalize(&run.comm);
    return 0;
}
