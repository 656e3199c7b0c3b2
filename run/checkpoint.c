#include "run/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/gpt2_io.h"
#include "util/crc32.h"
#include "device/device.h"
#include "util/errors.h"

#define MANIFEST_NAME "manifest.txt"
#define OPTIMIZER_MAGIC 20240401
#define PIECE_MAX_BYTES (1u << 20)  // rows are saved in pieces of at most 1 MiB, each with its CRC

// ---------------------------------------------------------------- files

// Short writes (a signal, a full disk part-way) are continued or reported: a
// checkpoint is either written whole or the save fails naming the file.
static void write_all(int fd, const void *data, size_t len, const char *path) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fatal("%s: write failed: %s", path, n < 0 ? strerror(errno) : "no progress");
        p += n;
        len -= (size_t)n;
    }
}

static void pwrite_all(int fd, const void *data, size_t len, uint64_t offset, const char *path) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fatal("%s: write failed: %s", path, n < 0 ? strerror(errno) : "no progress");
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
}

// O_NONBLOCK: a FIFO in the file's place fails at once instead of waiting for
// a reader; anything but a regular file is refused.
static int open_for_writing(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) fatal("%s: cannot create: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) fatal("%s: not a regular file", path);
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) fatal("%s: cannot set blocking writes", path);
    return fd;
}

static void sync_and_close(int fd, const char *path) {
    if (fsync(fd) != 0) fatal("%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0) fatal("%s: close failed: %s", path, strerror(errno));
}

// A rename is durable only once its directory is synced.
static void sync_directory(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) fatal("%s: cannot open directory: %s", path, strerror(errno));
    if (fsync(fd) != 0) fatal("%s: fsync of the directory failed: %s", path, strerror(errno));
    if (close(fd) != 0) fatal("%s: close of the directory failed: %s", path, strerror(errno));
}

// rm -r of a directory the checkpoint code made. A symbolic link inside is
// removed, never followed: nothing outside the directory is touched.
static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *dir = opendir(path);
    if (!dir) return;
    struct dirent *e;
    char child[4096];
    while ((e = readdir(dir)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            xsnprintf(child, sizeof child, "%s/%s", path, e->d_name);
            remove_tree(child);
        }
    closedir(dir);
    rmdir(path);
}

static void make_directory(const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) fatal("%s: cannot create directory: %s", path, strerror(errno));
}

typedef struct {
    int step;
    struct timespec written;  // the directory's modification time
    char name[64];            // its entry in the checkpoint directory
} SavedCheckpoint;

// The most recently written first; equal times by step, higher first.
static int newer_first(const void *pa, const void *pb) {
    const SavedCheckpoint *a = pa, *b = pb;
    if (a->written.tv_sec != b->written.tv_sec) return a->written.tv_sec < b->written.tv_sec ? 1 : -1;
    if (a->written.tv_nsec != b->written.tv_nsec) return a->written.tv_nsec < b->written.tv_nsec ? 1 : -1;
    return (a->step < b->step) - (a->step > b->step);
}

int checkpoint_name_kind(const char *name, int *step) {
    int used = 0;
    if (sscanf(name, "step_%d%n", step, &used) != 1) return CKPT_NAME_OTHER;
    if (name[used] == '\0') return CKPT_NAME_STEP;
    return strcmp(name + used, ".tmp") == 0 ? CKPT_NAME_TMP : CKPT_NAME_OTHER;
}

// Keeps the `keep` most recently written complete checkpoints and removes the
// others, and any .tmp directory a save that never finished left behind. Recency,
// not the step number: a run resumed from an older step keeps what it writes,
// not the higher steps of the run it branched from. `just_saved`, which `latest`
// names, is always kept (keep is at least 1). Only what a save makes is removed: real directories
// (not links) named step_N holding a manifest, and step_N.tmp directories; and never a step past
// `last_step`, the run's last: a branch's directory keeps the later saves of the run it branched from.
static void prune(const char *dir, int keep, int just_saved, int last_step) {
    DIR *d = opendir(dir);
    if (!d) return;
    SavedCheckpoint *saved = xcalloc(4096, sizeof *saved);
    int count = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        int step, kind = checkpoint_name_kind(e->d_name, &step);
        if (kind == CKPT_NAME_OTHER) continue;
        xsnprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st, manifest_st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || strlen(e->d_name) >= sizeof saved->name) continue;
        if (kind == CKPT_NAME_TMP) {
            remove_tree(path);
            continue;
        }
        char manifest[4200];
        xsnprintf(manifest, sizeof manifest, "%s/" MANIFEST_NAME, path);
        if (step != just_saved && step <= last_step && count < 4096 &&
            stat(manifest, &manifest_st) == 0) {
            saved[count] = (SavedCheckpoint){.step = step, .written = st.st_mtim};
            snprintf(saved[count++].name, sizeof saved->name, "%s", e->d_name);
        }
    }
    closedir(d);
    qsort(saved, (size_t)count, sizeof *saved, newer_first);
    for (int i = keep - 1; keep > 0 && i < count; i++) {  // just_saved takes one of the `keep` places
        xsnprintf(path, sizeof path, "%s/%s", dir, saved[i].name);
        remove_tree(path);
    }
    free(saved);
}

// ---------------------------------------------------------------- saving

typedef struct {
    CkptPiece *items;
    int count, capacity;
} PieceList;

static void push_piece(PieceList *list, CkptPiece piece) {
    if (list->count == list->capacity) {
        list->capacity = list->capacity ? 2 * list->capacity : 64;
        CkptPiece *grown = realloc(list->items, (size_t)list->capacity * sizeof(CkptPiece));
        if (!grown) fatal("out of memory listing checkpoint pieces");
        list->items = grown;
    }
    list->items[list->count++] = piece;
}

static int rows_per_piece(const GPT2Tensor *tensor) {
    size_t rows = PIECE_MAX_BYTES / (sizeof(float) * (size_t)tensor->cols);
    return rows > 0 ? (int)rows : 1;
}

// Sharded layout: this rank appends its rows to rank_NNNNN.bin, piece by piece.
static void save_sharded(const char *tmp, const Strategy *strategy, const GPT2Layout *layout, Comm *comm,
                         PieceList *pieces) {
    char path[4096];
    xsnprintf(path, sizeof path, "%s/rank_%05d.bin", tmp, comm->rank);
    int fd = -1;
    uint64_t offset = 0;
    for (int t = 0; t < layout->num_tensors; t++) {
        LocalRows rows;
        if (!strategy->local_rows(strategy->state, t, &rows)) continue;
        if (!rows.writes) {
            local_rows_done(&rows);
            continue;
        }
        if (fd < 0) fd = open_for_writing(path);
        size_t cols = (size_t)layout->tensors[t].cols;
        int chunk = rows_per_piece(&layout->tensors[t]);
        for (int r = 0; r < rows.row_count; r += chunk) {
            int count = rows.row_count - r < chunk ? rows.row_count - r : chunk;
            CkptPiece q = {.tensor = t, .row_begin = rows.row_begin + r, .row_count = count,
                           .adam_step = *rows.adam_step};
            const float *blocks[CKPT_MAX_PARTS] = {rows.params + r * cols, rows.m + r * cols, rows.v + r * cols,
                                                   rows.ema ? rows.ema + r * cols : NULL};
            size_t bytes = (size_t)count * cols * sizeof(float);
            float *host = xmalloc(bytes);  // the rows may live on a GPU
            for (int k = 0; k < (rows.ema ? 4 : 3); k++) {
                device_to_host(host, blocks[k], (size_t)count * cols);
                write_all(fd, host, bytes, path);
                q.file[k] = comm->rank;  // renumbered by rank 0
                q.offset[k] = offset;
                q.crc[k] = crc32_update(0, host, bytes);
                offset += bytes;
            }
            free(host);
            push_piece(pieces, q);
        }
        local_rows_done(&rows);
    }
    if (fd >= 0) sync_and_close(fd, path);
}

static const char *const full_names[3] = {"model.bin", "optimizer.bin", "ema.bin"};

// The header of full file f (full_names): llm.c's model header for the model and the EMA, the
// optimizer state's for m and v of P parameters; the rest zero.
static void full_header(int f, const GPT2Config *c, uint64_t P, int32_t header[LLMC_HEADER_INTS]) {
    memset(header, 0, LLMC_HEADER_INTS * sizeof(int32_t));
    int32_t model[] = {GPT2_CHECKPOINT_MAGIC, GPT2_CHECKPOINT_VERSION_FP32, c->max_seq_len, c->vocab_size,
                       c->num_layers, c->num_heads, c->channels, c->padded_vocab_size};
    int32_t optimizer[] = {OPTIMIZER_MAGIC, 1, (int32_t)P};
    if (f == 1) memcpy(header, optimizer, sizeof optimizer);
    else memcpy(header, model, sizeof model);
}

// Full layout: every tensor is assembled on rank 0 (a reduce of zero-filled
// buffers into which each row's keeper copied it) and written into model.bin in
// llm.c's format and optimizer.bin; with --ema, the EMA weights into ema.bin, an
// llm.c model file too.
static void save_full(const char *tmp, const Strategy *strategy, const GPT2Layout *layout, Comm *comm, int parts,
                      PieceList *pieces) {
    static const int file_of_part[CKPT_MAX_PARTS] = {0, 1, 1, 2};  // params, m, v, ema
    char path[3][4096];
    int fd[3] = {-1, -1, -1}, files = parts == 4 ? 3 : 2, root = comm->rank == 0;
    uint64_t header_bytes = LLMC_HEADER_INTS * sizeof(int32_t), P = layout->num_params;
    for (int f = 0; f < files && root; f++) {
        int32_t header[LLMC_HEADER_INTS];
        full_header(f, &layout->config, P, header);
        xsnprintf(path[f], sizeof path[f], "%s/%s", tmp, full_names[f]);
        fd[f] = open_for_writing(path[f]);
        write_all(fd[f], header, sizeof header, path[f]);
    }
    MemAccount scratch = {0};  // checkpoint buffers are not training memory
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        // params, m, v (, ema) side by side, in device memory (collectives run on device buffers)
        float *assembled = device_alloc(&scratch, MEM_COMM_BUFFERS, parts * tensor->numel);
        LocalRows rows;
        double step = 0;
        int kept = strategy->local_rows(strategy->state, t, &rows);
        if (kept && rows.writes) {
            size_t at = (size_t)rows.row_begin * tensor->cols, n = (size_t)rows.row_count * tensor->cols;
            const float *part[CKPT_MAX_PARTS] = {rows.params, rows.m, rows.v, rows.ema};
            for (int k = 0; k < parts; k++) device_copy(assembled + k * tensor->numel + at, part[k], n);
            step = *rows.adam_step;
        }
        if (kept) local_rows_done(&rows);
        comm_reduce(comm, assembled, root ? assembled : NULL, parts * tensor->numel, DTYPE_FP32, 0, COMM_SUM);
        step = comm_metric_max(comm, step);
        float *full = root ? xmalloc(parts * tensor->numel * sizeof(float)) : NULL;
        if (root) device_to_host(full, assembled, parts * tensor->numel);
        device_free(&scratch, MEM_COMM_BUFFERS, assembled, parts * tensor->numel);
        if (root) {
            uint64_t offsets[CKPT_MAX_PARTS] = {header_bytes + tensor->offset * sizeof(float),
                                                header_bytes + tensor->offset * sizeof(float),
                                                header_bytes + (P + tensor->offset) * sizeof(float),
                                                header_bytes + tensor->offset * sizeof(float)};
            int chunk = rows_per_piece(tensor);
            for (int r = 0; r < tensor->rows; r += chunk) {
                int count = tensor->rows - r < chunk ? tensor->rows - r : chunk;
                size_t first = (size_t)r * tensor->cols, bytes = (size_t)count * tensor->cols * sizeof(float);
                CkptPiece q = {.tensor = t, .row_begin = r, .row_count = count, .adam_step = (int)step};
                for (int k = 0; k < parts; k++) {
                    q.file[k] = file_of_part[k];
                    q.offset[k] = offsets[k] + first * sizeof(float);
                    q.crc[k] = crc32_update(0, full + k * tensor->numel + first, bytes);
                }
                push_piece(pieces, q);
            }
            for (int k = 0; k < parts; k++)
                pwrite_all(fd[file_of_part[k]], full + k * tensor->numel, tensor->numel * sizeof(float), offsets[k],
                           path[file_of_part[k]]);
        }
        free(full);
    }
    for (int f = 0; f < files && root; f++) sync_and_close(fd[f], path[f]);
}

static uint64_t file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) fatal("%s: cannot stat: %s", path, strerror(errno));
    return (uint64_t)st.st_size;
}

void checkpoint_save(const CkptSaveOptions *opts, const Strategy *strategy, const GPT2Layout *layout,
                     Comm *comm, int step, uint64_t data_position, uint64_t seed) {
    char final[4096], tmp[4096];
    xsnprintf(final, sizeof final, "%s/step_%08d", opts->dir, step);
    xsnprintf(tmp, sizeof tmp, "%s.tmp", final);
    if (comm->rank == 0) {
        make_directory(opts->dir);
        remove_tree(tmp);
        make_directory(tmp);
    }
    comm_metric_max(comm, 0);  // a barrier: the directory exists before anyone writes
    if (opts->pause_mid_save_s > 0) usleep((useconds_t)(opts->pause_mid_save_s * 1e6));
    PieceList mine = {0};
    int parts = opts->ema > 0 ? 4 : 3;
    if (opts->full) save_full(tmp, strategy, layout, comm, parts, &mine);
    else save_sharded(tmp, strategy, layout, comm, &mine);
    size_t *counts = NULL;
    CkptPiece *all = comm_metric_gather(comm, mine.items, (size_t)mine.count * sizeof(CkptPiece), &counts);
    free(mine.items);
    if (comm->rank == 0) {
        CkptManifest m = {.world_size = comm->world, .step = step, .data_position = data_position, .seed = seed,
                          .config = layout->config, .ema_decay = opts->ema};
        snprintf(m.strategy, sizeof m.strategy, "%s", strategy->name);
        snprintf(m.precision, sizeof m.precision, "%s", opts->precision ? opts->precision : "fp32");
        size_t total = 0;
        for (int r = 0; r < comm->world; r++) total += counts[r] / sizeof(CkptPiece);
        m.num_pieces = (int)total;
        m.pieces = all;
        m.files = xcalloc((size_t)comm->world + 2, sizeof *m.files);
        m.file_sizes = xcalloc((size_t)comm->world + 2, sizeof *m.file_sizes);
        if (opts->full) {
            for (int f = 0; f < 3; f++) snprintf(m.files[f], CKPT_MAX_PATH, "%s", full_names[f]);
            m.num_files = parts == 4 ? 3 : 2;
        } else {
            // one file per rank that wrote anything; renumber the pieces' file indices
            int *index_of_rank = xcalloc((size_t)comm->world, sizeof(int));
            for (int r = 0; r < comm->world; r++) {
                int wrote = counts[r] > 0;
                index_of_rank[r] = wrote ? m.num_files : -1;
                if (wrote) snprintf(m.files[m.num_files++], CKPT_MAX_PATH, "rank_%05d.bin", r);
            }
            for (int i = 0; i < m.num_pieces; i++)
                for (int k = 0; k < parts; k++) m.pieces[i].file[k] = index_of_rank[m.pieces[i].file[k]];
            free(index_of_rank);
        }
        char path[4096];
        for (int f = 0; f < m.num_files; f++) {
            xsnprintf(path, sizeof path, "%s/%s", tmp, m.files[f]);
            m.file_sizes[f] = file_size(path);
        }
        size_t len;
        char *text = ckpt_manifest_text(&m, &len);
        if (!text) fatal("out of memory writing the manifest");
        xsnprintf(path, sizeof path, "%s/" MANIFEST_NAME, tmp);
        int fd = open_for_writing(path);
        write_all(fd, text, len, path);
        sync_and_close(fd, path);
        free(text);
        sync_directory(tmp);
        // commit: the rename makes the checkpoint appear whole, then `latest` moves to it
        remove_tree(final);
        if (rename(tmp, final) != 0) fatal("%s: cannot rename to %s: %s", tmp, final, strerror(errno));
        char latest[4096], latest_tmp[4096];
        xsnprintf(latest, sizeof latest, "%s/latest", opts->dir);
        xsnprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", opts->dir);
        fd = open_for_writing(latest_tmp);
        char name[64];
        int n = snprintf(name, sizeof name, "step_%08d\n", step);
        write_all(fd, name, (size_t)n, latest_tmp);
        sync_and_close(fd, latest_tmp);
        if (rename(latest_tmp, latest) != 0) fatal("%s: cannot rename: %s", latest_tmp, strerror(errno));
        sync_directory(opts->dir);
        prune(opts->dir, opts->keep, step, opts->last_step);
        ckpt_manifest_free(&m);  // frees `all` too
        free(counts);
    }
    comm_metric_max(comm, 0);  // everyone returns once the checkpoint is committed
}

// ---------------------------------------------------------------- loading

void checkpoint_resolve(const char *path, char *dir, size_t size) {
    char probe[4096];
    xsnprintf(probe, sizeof probe, "%s/" MANIFEST_NAME, path);
    if (access(probe, F_OK) == 0) { xsnprintf(dir, size, "%s", path); return; }
    xsnprintf(probe, sizeof probe, "%s/latest", path);
    if (access(probe, F_OK) != 0) {
        if (errno != ENOENT) fatal("%s: cannot read: %s", probe, strerror(errno));  // a link loop, say
        fatal("%s: no checkpoint here (neither %s nor latest)", path, MANIFEST_NAME);
    }
    FILE *f = xfopen(probe, "r");  // a regular file: a FIFO here is refused, not waited on
    char name[256] = "";
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    int longer = !strchr(name, '\n') && fgetc(f) != EOF;  // a first line past the buffer: no name of ours
    fclose(f);
    name[strcspn(name, "\n")] = '\0';
    if (longer || !ckpt_valid_file_name(name))
        fatal("%s: malformed (expected a checkpoint name such as step_00000010)", probe);
    xsnprintf(dir, size, "%s/%s", path, name);
}

static int same_config(const GPT2Config *a, const GPT2Config *b) {
    return a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->channels == b->channels && a->padded_vocab_size == b->padded_vocab_size;
}

static int by_tensor_then_row(const void *pa, const void *pb) {
    const CkptPiece *a = pa, *b = pb;
    if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
    return (a->row_begin > b->row_begin) - (a->row_begin < b->row_begin);
}

// Rows [first, end) of a tensor are missing when end > first.
static void check_no_gap(const char *manifest_path, const GPT2Tensor *tensor, int first, int end) {
    if (end > first)
        fatal("%s: rows %d..%d of %s are in no piece", manifest_path, first, end - 1, tensor->name);
}

// One part of one piece: bytes [begin, end) of a file.
typedef struct {
    int file, piece, part;
    uint64_t begin, end;
} ByteRange;

static int by_file_then_offset(const void *pa, const void *pb) {
    const ByteRange *a = pa, *b = pb;
    if (a->file != b->file) return (a->file > b->file) - (a->file < b->file);
    return (a->begin > b->begin) - (a->begin < b->begin);
}

// No two parts of the pieces share a byte: a manifest that points one piece's
// EMA at its parameters (say) would load the weights as the EMA.
static void check_no_shared_bytes(const char *manifest_path, const CkptManifest *m, const GPT2Layout *layout) {
    static const char *const parts[CKPT_MAX_PARTS] = {"parameters", "AdamW m", "AdamW v", "EMA"};
    size_t n = 0;
    ByteRange *ranges = xmalloc((size_t)m->num_pieces * CKPT_MAX_PARTS * sizeof *ranges);
    for (int i = 0; i < m->num_pieces; i++) {
        const CkptPiece *q = &m->pieces[i];
        uint64_t bytes = (uint64_t)q->row_count * (uint64_t)layout->tensors[q->tensor].cols * sizeof(float);
        for (int k = 0; k < ckpt_parts(m); k++)
            ranges[n++] = (ByteRange){q->file[k], i, k, q->offset[k], q->offset[k] + bytes};
    }
    qsort(ranges, n, sizeof *ranges, by_file_then_offset);
    for (size_t j = 1; j < n; j++) {
        const ByteRange *a = &ranges[j - 1], *b = &ranges[j];
        if (a->file == b->file && b->begin < a->end)
            fatal("%s: piece %d's %s and piece %d's %s share bytes %" PRIu64 "..%" PRIu64 " of %s: each part needs "
                  "bytes of its own", manifest_path, a->piece, parts[a->part], b->piece, parts[b->part], b->begin,
                  (a->end < b->end ? a->end : b->end) - 1, m->files[a->file]);
    }
    free(ranges);
}

// Every number the manifest gives is checked before a byte is read: each piece
// names a tensor of this model and rows inside it, its byte ranges lie inside
// their files and share no byte with another's, its AdamW step is not past the
// checkpoint's, and the pieces cover every row of every tensor exactly once
// (counting rows alone, a repeated row could hide a missing one).
static void check_pieces(const char *manifest_path, const CkptManifest *m, const GPT2Layout *layout) {
    static const char *const parts[CKPT_MAX_PARTS] = {"parameters", "AdamW m", "AdamW v", "EMA"};
    for (int i = 0; i < m->num_pieces; i++) {
        const CkptPiece *q = &m->pieces[i];
        if (q->tensor >= layout->num_tensors)
            fatal("%s: piece %d names tensor %d; the model has %d tensors", manifest_path, i, q->tensor,
                  layout->num_tensors);
        const GPT2Tensor *tensor = &layout->tensors[q->tensor];
        if (q->row_count < 1 || (int64_t)q->row_begin + q->row_count > tensor->rows)
            fatal("%s: piece %d: rows %d..%lld of %s, which has rows 0..%d", manifest_path, i, q->row_begin,
                  (long long)q->row_begin + q->row_count - 1, tensor->name, tensor->rows - 1);
        uint64_t bytes = (uint64_t)q->row_count * (uint64_t)tensor->cols * sizeof(float);
        for (int k = 0; k < ckpt_parts(m); k++) {
            uint64_t size = m->file_sizes[q->file[k]];
            if (q->offset[k] > size || bytes > size - q->offset[k])
                fatal("%s: piece %d: the %s of rows %d..%d of %s, %" PRIu64 " bytes at offset %" PRIu64
                      ", lie past the end of %s (%" PRIu64 " bytes)", manifest_path, i, parts[k], q->row_begin,
                      q->row_begin + q->row_count - 1, tensor->name, bytes, q->offset[k], m->files[q->file[k]], size);
        }
        if (q->adam_step > m->step)
            fatal("%s: piece %d: AdamW step %d of %s is past the checkpoint's step %d", manifest_path, i,
                  q->adam_step, tensor->name, m->step);
    }
    CkptPiece *sorted = xmalloc((size_t)m->num_pieces * sizeof *sorted);
    memcpy(sorted, m->pieces, (size_t)m->num_pieces * sizeof *sorted);
    qsort(sorted, (size_t)m->num_pieces, sizeof *sorted, by_tensor_then_row);
    int i = 0;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        int next_row = 0;  // the rows before it are covered
        for (; i < m->num_pieces && sorted[i].tensor == t; i++) {
            const CkptPiece *q = &sorted[i];
            check_no_gap(manifest_path, tensor, next_row, q->row_begin);
            if (q->row_begin < next_row)
                fatal("%s: rows %d..%d of %s are in more than one piece", manifest_path, q->row_begin,
                      (next_row < q->row_begin + q->row_count ? next_row : q->row_begin + q->row_count) - 1,
                      tensor->name);
            next_row = q->row_begin + q->row_count;
        }
        check_no_gap(manifest_path, tensor, next_row, tensor->rows);
    }
    free(sorted);
    check_no_shared_bytes(manifest_path, m, layout);  // after the rows: a piece listed twice is named as such
}

// The flags that make a model of this config: a preset's, or a --model file's shape.
static void describe_config(const GPT2Config *c, char *out, size_t size) {
    static const char *const presets[] = {"d2", "d4", "d6", "d12"};
    for (int i = 0; i < 4; i++) {
        GPT2Config preset;
        if (gpt2_config_preset(presets[i], c->vocab_size, &preset) == 0 && same_config(&preset, c)) {
            snprintf(out, size, "--config %s --vocab %d", presets[i], c->vocab_size);
            return;
        }
    }
    snprintf(out, size, "a --model of that shape (build/init_model --layers %d --heads %d --channels %d --vocab %d "
             "--max-seq %d)", c->num_layers, c->num_heads, c->channels, c->vocab_size, c->max_seq_len);
}

// Reads one whole piece (params, m, v), checks its CRCs, and copies the rows that
// overlap [row_begin, row_begin + row_count) into `rows`.
static void load_piece(const char *dir, const CkptManifest *m, const CkptPiece *q, const GPT2Tensor *tensor,
                       LocalRows *rows, FILE **open_files) {
    size_t cols = (size_t)tensor->cols, n = (size_t)q->row_count * cols;
    float *buf = xmalloc(n * sizeof(float));
    float *dest[CKPT_MAX_PARTS] = {rows->params, rows->m, rows->v, rows->ema};
    static const char *const names[CKPT_MAX_PARTS] = {"parameters", "AdamW m", "AdamW v", "EMA"};
    int first = q->row_begin > rows->row_begin ? q->row_begin : rows->row_begin;
    int last = q->row_begin + q->row_count < rows->row_begin + rows->row_count ? q->row_begin + q->row_count
                                                                               : rows->row_begin + rows->row_count;
    for (int k = 0; k < ckpt_parts(m) && dest[k]; k++) {  // a run without --ema leaves the EMA unread
        char path[4096];
        xsnprintf(path, sizeof path, "%s/%s", dir, m->files[q->file[k]]);
        FILE *f = open_files[q->file[k]];
        if (!f) f = open_files[q->file[k]] = xfopen(path, "rb");
        if (fseeko(f, (off_t)q->offset[k], SEEK_SET) != 0 || fread(buf, sizeof(float), n, f) != n)
            fatal("%s: truncated: rows %d..%d of %s are missing", path, q->row_begin, q->row_begin + q->row_count - 1,
                  tensor->name);
        if (crc32_update(0, buf, n * sizeof(float)) != q->crc[k])
            fatal("%s: checksum mismatch in rows %d..%d of %s (%s): the file is corrupted", path, q->row_begin,
                  q->row_begin + q->row_count - 1, tensor->name, names[k]);
        device_from_host(dest[k] + (size_t)(first - rows->row_begin) * cols, buf + (size_t)(first - q->row_begin) * cols,
                         (size_t)(last - first) * cols);
    }
    free(buf);
}

// --save-full's files are llm.c's formats, read here by their rows' offsets alone: their headers must still be
// what the manifest describes, or llm.c (and build/sample) would read another model from them.
static void check_full_headers(const char *dir, const CkptManifest *m, const GPT2Layout *layout,
                               const char *manifest_path) {
    if (m->num_files == 0 || strcmp(m->files[0], full_names[0]) != 0) return;  // shards of their own
    for (int f = 0; f < m->num_files; f++) {
        char path[4200];
        xsnprintf(path, sizeof path, "%s/%s", dir, m->files[f]);
        int32_t got[LLMC_HEADER_INTS], want[LLMC_HEADER_INTS];
        full_header(f, &m->config, layout->num_params, want);
        FILE *in = xfopen(path, "rb");
        xfread(got, sizeof(int32_t), LLMC_HEADER_INTS, in, path);
        fclose(in);
        if (memcmp(got, want, sizeof got) != 0)
            fatal("%s: its header is not the one %s describes (%s): the file was changed after the save", path,
                  manifest_path, f == 1 ? "AdamW's m and v of this model's parameters" : "this model, llm.c's format");
    }
}

void checkpoint_load(const char *path, const Strategy *strategy, const GPT2Layout *layout, Comm *comm, float ema,
                     const char *precision, CkptManifest *m) {
    char dir[4096], manifest_path[4200], err[256];
    checkpoint_resolve(path, dir, sizeof dir);
    xsnprintf(manifest_path, sizeof manifest_path, "%s/" MANIFEST_NAME, dir);
    size_t len;
    char *text = xread_file(manifest_path, &len);
    if (ckpt_manifest_parse(text, len, m, err, sizeof err) != 0) fatal("%s: %s", manifest_path, err);
    free(text);
    if (!same_config(&m->config, &layout->config)) {
        char resume_with[160];
        describe_config(&m->config, resume_with, sizeof resume_with);
        fatal("%s: checkpoint is for L=%d NH=%d C=%d V=%d maxT=%d, but this run's model is L=%d NH=%d C=%d V=%d maxT=%d: "
              "resume it with %s", manifest_path, m->config.num_layers, m->config.num_heads, m->config.channels,
              m->config.vocab_size, m->config.max_seq_len, layout->config.num_layers, layout->config.num_heads,
              layout->config.channels, layout->config.vocab_size, layout->config.max_seq_len, resume_with);
    }
    check_pieces(manifest_path, m, layout);
    // The checkpoint keeps the fp32 master either way, but a bf16 run's state is what its bf16 steps made:
    // continuing it in fp32 (or an fp32 run in bf16) is another training, not a resume.
    if (m->precision[0] && precision && strcmp(m->precision, precision) != 0)
        fatal("%s: the checkpoint was saved by a --precision %s run, this run asks for --precision %s: give "
              "--precision %s to continue it", manifest_path, m->precision, precision, m->precision);
    if (ema > 0 && m->ema_decay == 0)
        fatal("%s: the checkpoint has no EMA weights (it was saved without --ema): resume it without --ema",
              manifest_path);
    if (ema > 0 && ema != m->ema_decay)
        fatal("%s: the checkpoint's EMA has decay %s, this run asks for --ema %s: give --ema %s to continue it",
              manifest_path, ckpt_decay_text(m->ema_decay).text, ckpt_decay_text(ema).text,
              ckpt_decay_text(m->ema_decay).text);
    for (int f = 0; f < m->num_files; f++) {  // missing or cut files fail here, before any reading
        char file_path[4200];
        xsnprintf(file_path, sizeof file_path, "%s/%s", dir, m->files[f]);
        struct stat st;
        if (stat(file_path, &st) != 0) fatal("%s: missing (listed in %s)", file_path, manifest_path);
        if (!S_ISREG(st.st_mode))
            fatal("%s: not a regular file (%s), where %s lists a shard of %" PRIu64 " bytes", file_path,
                  S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket",
                  manifest_path, m->file_sizes[f]);
        if ((uint64_t)st.st_size != m->file_sizes[f])
            fatal("%s: %s: %lld bytes, the manifest says %" PRIu64, file_path,
                  (uint64_t)st.st_size < m->file_sizes[f] ? "truncated" : "wrong size", (long long)st.st_size,
                  m->file_sizes[f]);
    }
    check_full_headers(dir, m, layout, manifest_path);
    FILE **open_files = xcalloc((size_t)m->num_files, sizeof(FILE *));
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        LocalRows rows;
        if (!strategy->local_rows(strategy->state, t, &rows)) continue;
        for (int i = 0; i < m->num_pieces; i++) {
            const CkptPiece *q = &m->pieces[i];
            if (q->tensor != t || q->row_begin + q->row_count <= rows.row_begin ||
                q->row_begin >= rows.row_begin + rows.row_count)
                continue;
            load_piece(dir, m, q, tensor, &rows, open_files);  // check_pieces: they cover every row once
            *rows.adam_step = q->adam_step;
        }
        if (rows.working) device_round(rows.working, rows.params, (size_t)rows.row_count * tensor->cols);
        local_rows_done(&rows);
    }
    for (int f = 0; f < m->num_files; f++)
        if (open_files[f]) fclose(open_files[f]);
    free(open_files);
    (void)comm;
}
