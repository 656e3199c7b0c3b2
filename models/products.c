// products.c: the engine every matrix product of the layers runs on, on the CPU.
//
// Two engines are linked: oneDNN and OpenBLAS (its OpenMP build). Which one
// multiplies is chosen once per process, by a rule on the instruction set
// oneDNN finds on this CPU (ONEDNN_MAX_CPU_ISA caps it), from paired
// measurements of the d12 step on both engines (docs/performance.md):
//
//   oneDNN's instruction set     fp32 products   bf16 products
//   sse41, avx, avx2, avx2_vnni  OpenBLAS        widened, then OpenBLAS
//   avx512_core, _vnni           oneDNN          widened, then oneDNN
//   avx512_core_bf16, _amx       oneDNN          oneDNN's bf16 matmul
//
// "widened": where the CPU has no bf16 instructions oneDNN has no bf16 kernel
// (below AVX-512) or only an emulated one (AVX-512 without AVX512-BF16: 3.3x
// slower than fp32 here), so the bf16 operands are widened to fp32 (exactly) in
// tiles and multiplied by the fp32 engine: a bf16 step costs about an fp32 one.
// SHARDLAB_PRODUCTS=onednn|openblas overrides the rule. The rule reads only
// what every rank of a machine reads alike, so ranks and their reference
// multiply on one engine (the ranks also compare it: run/agree.c).
#include "models/gpt2_ops.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/errors.h"

typedef enum { ENGINE_ONEDNN, ENGINE_OPENBLAS } EngineId;

typedef struct {
    EngineId fp32;      // the engine of `product`
    int bf16_kernel;    // 1: oneDNN's bf16 matmul; 0: widened to fp32, then `product`
    const char *isa;    // oneDNN's instruction set here
    const char *chosen_by;
} Choice;

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

// oneDNN reads ONEDNN_MAX_CPU_ISA and ignores a value it does not know; a run
// that says which instruction set it computed on refuses it instead.
static void check_isa_cap(void) {
    static const char *const known[] = {"ALL", "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE",
                                        "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX512_CORE_AMX"};
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (!cap) return;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(cap, known[i]) == 0) return;
    fatal("ONEDNN_MAX_CPU_ISA=%.64s: not an instruction set oneDNN knows (SSE41, AVX, AVX2, AVX2_VNNI, "
          "AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_AMX or ALL)", cap);
}

static Choice choice;
static pthread_once_t choice_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    check_isa_cap();
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    choice.isa = isa_name(isa);
    int below_avx512 = isa == dnnl_cpu_isa_sse41 || isa == dnnl_cpu_isa_avx || isa == dnnl_cpu_isa_avx2 ||
                       isa == dnnl_cpu_isa_avx2_vnni;
    choice.fp32 = below_avx512 ? ENGINE_OPENBLAS : ENGINE_ONEDNN;
    choice.chosen_by = "the rule for this instruction set";
    const char *forced = getenv("SHARDLAB_PRODUCTS");
    if (forced) {
        if (strcmp(forced, "onednn") == 0) choice.fp32 = ENGINE_ONEDNN;
        else if (strcmp(forced, "openblas") == 0) choice.fp32 = ENGINE_OPENBLAS;
        else fatal("SHARDLAB_PRODUCTS=%.64s: the products' engine is onednn or openblas", forced);
        choice.chosen_by = "SHARDLAB_PRODUCTS";
    }
    choice.bf16_kernel = choice.fp32 == ENGINE_ONEDNN &&
                         (isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx);
}

static const Choice *chosen(void) {
    CHECK(pthread_once(&choice_once, choose) == 0, "products: pthread_once failed");
    return &choice;
}

void product_choose(void) { (void)chosen(); }

// ---- oneDNN ----

// The process's one CPU engine and its stream, made at the first matmul
// (what a GPU build's cuBLAS handle is to its device).
static dnnl_engine_t onednn_engine(dnnl_stream_t *stream) {
    static dnnl_engine_t engine;
    static dnnl_stream_t engine_stream;
#pragma omp critical(onednn_engine)
    if (!engine) {
        CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success, "oneDNN: no CPU engine");
        CHECK(dnnl_stream_create(&engine_stream, engine, dnnl_stream_default_flags) == dnnl_success,
              "oneDNN: no CPU stream");
    }
    *stream = engine_stream;
    return engine;
}

// oneDNN's matmul for C (M,N) = op(A) op(B) + beta C, beta 0 or 1 (a sum post-op):
// A and B fp32 or bf16 (ab_dtype), fp32 accumulation, C fp32 or bf16 (the sum and
// the post-op in fp32, rounded once as it is stored). NULL where oneDNN has no
// kernel for these types on this CPU. oneDNN's primitive cache keeps each
// shape's kernel, so only a shape's first call builds it.
static dnnl_primitive_t matmul(dnnl_engine_t engine, DType ab_dtype, char transa, char transb, int M, int N, int K,
                               int lda, int ldb, float beta, DType c_dtype, int ldc, dnnl_memory_desc_t descs[3]) {
    dnnl_data_type_t ab = ab_dtype == DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    dnnl_dims_t a_strides = {transa == 'T' ? 1 : lda, transa == 'T' ? lda : 1};  // op(A)'s (m, k) element
    dnnl_dims_t b_strides = {transb == 'T' ? 1 : ldb, transb == 'T' ? ldb : 1};  // op(B)'s (k, n) element
    dnnl_dims_t c_strides = {ldc, 1};
    CHECK(dnnl_memory_desc_init_by_strides(&descs[0], 2, a_dims, ab, a_strides) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&descs[1], 2, b_dims, ab, b_strides) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&descs[2], 2, c_dims, c_dtype == DTYPE_BF16 ? dnnl_bf16 : dnnl_f32,
                                               c_strides) == dnnl_success,
          "oneDNN: product %dx%dx%d: bad shape", M, N, K);
    dnnl_matmul_desc_t desc;
    CHECK(dnnl_matmul_desc_init(&desc, &descs[0], &descs[1], NULL, &descs[2]) == dnnl_success,
          "oneDNN: product %dx%dx%d: no description", M, N, K);
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t sum = NULL;
    CHECK(dnnl_primitive_attr_create(&attr) == dnnl_success, "oneDNN: no attributes");
    if (beta != 0) {
        CHECK(beta == 1, "oneDNN's matmul adds into C (beta 1) or writes it (beta 0), not beta %g", beta);
        CHECK(dnnl_post_ops_create(&sum) == dnnl_success && dnnl_post_ops_append_sum(sum, 1.0f) == dnnl_success &&
                  dnnl_primitive_attr_set_post_ops(attr, sum) == dnnl_success,
              "oneDNN: no sum post-op");
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t primitive = NULL;
    dnnl_status_t status = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL);
    if (status == dnnl_success) CHECK(dnnl_primitive_create(&primitive, pd) == dnnl_success, "oneDNN: no matmul");
    CHECK(status == dnnl_success || status == dnnl_unimplemented, "oneDNN: product %dx%dx%d failed (status %d)", M,
          N, K, (int)status);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (sum) dnnl_post_ops_destroy(sum);
    dnnl_primitive_attr_destroy(attr);
    return primitive;
}

// Runs matmul(...) on A, B and C; 0 where oneDNN has no kernel for it.
static int onednn_matmul(DType ab_dtype, char transa, char transb, int M, int N, int K, const void *A, int lda,
                         const void *B, int ldb, float beta, void *C, DType c_dtype, int ldc) {
    dnnl_stream_t stream;
    dnnl_engine_t engine = onednn_engine(&stream);
    dnnl_memory_desc_t descs[3];
    dnnl_primitive_t primitive = matmul(engine, ab_dtype, transa, transb, M, N, K, lda, ldb, beta, c_dtype, ldc, descs);
    if (!primitive) return 0;
    dnnl_memory_t memory[3];
    void *handles[3] = {(void *)A, (void *)B, C};
    for (int i = 0; i < 3; i++)
        CHECK(dnnl_memory_create(&memory[i], &descs[i], engine, handles[i]) == dnnl_success, "oneDNN: no memory");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, memory[0]}, {DNNL_ARG_WEIGHTS, memory[1]}, {DNNL_ARG_DST, memory[2]}};
    CHECK(dnnl_primitive_execute(primitive, stream, 3, args) == dnnl_success &&
              dnnl_stream_wait(stream) == dnnl_success,
          "oneDNN: product %dx%dx%d failed", M, N, K);
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(memory[i]);
    dnnl_primitive_destroy(primitive);
    return 1;
}

// ---- fp32 ----

// The entry an fp32 product takes. On oneDNN the forward's products (B, the
// weight, transposed) run on its matmul primitive, the others on its sgemm: each
// the faster of the two on the model's shapes (docs/performance.md).
typedef enum { ROUTE_OPENBLAS_SGEMM, ROUTE_ONEDNN_MATMUL, ROUTE_ONEDNN_SGEMM } Route;
static const char *const route_names[] = {"OpenBLAS sgemm", "oneDNN matmul", "oneDNN sgemm"};

static Route route(char transa, char transb, float alpha, float beta) {
    if (chosen()->fp32 == ENGINE_OPENBLAS) return ROUTE_OPENBLAS_SGEMM;
    if (transa == 'N' && transb == 'T' && alpha == 1 && (beta == 0 || beta == 1)) return ROUTE_ONEDNN_MATMUL;
    return ROUTE_ONEDNN_SGEMM;
}

void product(char transa, char transb, int M, int N, int K, real_t alpha, const real_t *A, int lda, const real_t *B,
             int ldb, real_t beta, real_t *C, int ldc) {
    switch (route(transa, transb, alpha, beta)) {
    case ROUTE_OPENBLAS_SGEMM:
        cblas_sgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans,
                    transb == 'T' ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    case ROUTE_ONEDNN_MATMUL:
        if (onednn_matmul(DTYPE_FP32, transa, transb, M, N, K, A, lda, B, ldb, beta, C, DTYPE_FP32, ldc)) return;
        __attribute__((fallthrough));  // no matmul kernel for this shape: its sgemm
    case ROUTE_ONEDNN_SGEMM: {
        dnnl_status_t status = dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        CHECK(status == dnnl_success, "oneDNN's sgemm %c%c %dx%dx%d failed (status %d)", transa, transb, M, N, K,
              (int)status);  // a shape the layers never ask for; nothing to recover
    }
    }
}

// ---- bf16, widened ----

// The widened path's tiles: op(A) (MC,KC), op(B) (KC,NC) and their fp32 sums
// (MC,NC), MC and KC at most 1024 and NC as wide as WORKSPACE_FLOATS then allows
// (a thin product's whole width: a product split into narrow ones runs slower).
// The workspace, 16 MB at most, is the engine's own as OpenBLAS's packing buffers
// are (kept for the thread's next product; not in the memory account).
enum { TILE = 1024, WORKSPACE_FLOATS = 4 << 20 };

// dst (rows,cols) = src's rows [r0, r0+rows) and columns [c0, c0+cols), widened (exact).
static void widen(float *dst, const bf16 *src, int ld, int r0, int rows, int c0, int cols) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        const bf16 *s = src + (size_t)(r0 + r) * ld + c0;
        float *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = bf16_to_float(s[c]);  // vectorised
    }
}

// C's tile at (m0, n0), (rows,cols) = sums + (beta ? C : 0), rounded once where C is bf16.
static void store(void *C, DType c_dtype, int ldc, int m0, int n0, const float *sums, int rows, int cols,
                  float beta) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        const float *s = sums + (size_t)r * cols;
        if (c_dtype == DTYPE_BF16) {
            bf16 *c = (bf16 *)C + (size_t)(m0 + r) * ldc + n0;
            for (int n = 0; n < cols; n++) c[n] = bf16_from_float(s[n] + (beta == 0 ? 0 : bf16_to_float(c[n])));
        } else {
            float *c = (float *)C + (size_t)(m0 + r) * ldc + n0;
            for (int n = 0; n < cols; n++) c[n] = s[n] + (beta == 0 ? 0 : c[n]);  // vectorised
        }
    }
}

// Each output's sum runs from 0 over K in tiles of KC, each tile's on the fp32
// engine, then C's own value is added: the tiles depend on the shape alone, so
// every rank multiplying a shape sums it alike.
static void product_bf16_widened(char transa, char transb, int M, int N, int K, const bf16 *A, int lda,
                                 const bf16 *B, int ldb, float beta, void *C, DType c_dtype, int ldc) {
    static _Thread_local float *workspace;
    static _Thread_local size_t workspace_floats;
    int mc = M < TILE ? M : TILE, kc = K < TILE ? K : TILE;
    size_t wide = (WORKSPACE_FLOATS - (size_t)mc * kc) / (size_t)(kc + mc > 0 ? kc + mc : 1);
    int nc = (size_t)N < wide ? N : (int)wide;
    size_t need = (size_t)mc * kc + (size_t)kc * nc + (size_t)mc * nc;
    if (need > workspace_floats) {
        free(workspace);
        workspace = xmalloc(need * sizeof(float));
        workspace_floats = need;
    }
    float *a = workspace, *b = a + (size_t)mc * kc, *sums = b + (size_t)kc * nc;
    for (int m0 = 0; m0 < M; m0 += mc)
        for (int n0 = 0; n0 < N; n0 += nc) {
            int rows = M - m0 < mc ? M - m0 : mc, cols = N - n0 < nc ? N - n0 : nc;
            if (K == 0) memset(sums, 0, (size_t)rows * cols * sizeof(float));
            for (int k0 = 0; k0 < K; k0 += kc) {
                int depth = K - k0 < kc ? K - k0 : kc;
                // op(A)'s tile as stored: (rows,depth), or (depth,rows) transposed; op(B)'s likewise
                if (transa == 'T') widen(a, A, lda, k0, depth, m0, rows);
                else widen(a, A, lda, m0, rows, k0, depth);
                if (transb == 'T') widen(b, B, ldb, n0, cols, k0, depth);
                else widen(b, B, ldb, k0, depth, n0, cols);
                product(transa, transb, rows, cols, depth, 1, a, transa == 'T' ? rows : depth, b,
                        transb == 'T' ? depth : cols, k0 == 0 ? 0 : 1, sums, cols);
            }
            store(C, c_dtype, ldc, m0, n0, sums, rows, cols, beta);
        }
}

void product_bf16(char transa, char transb, int M, int N, int K, const bf16 *A, int lda, const bf16 *B, int ldb,
                  float beta, void *C, DType c_dtype, int ldc) {
    if (chosen()->bf16_kernel &&
        onednn_matmul(DTYPE_BF16, transa, transb, M, N, K, A, lda, B, ldb, beta, C, c_dtype, ldc))
        return;
    product_bf16_widened(transa, transb, M, N, K, A, lda, B, ldb, beta, C, c_dtype, ldc);
}

// ---- what runs ----

const char *product_route(char transa, char transb, DType operands) {
    if (operands == DTYPE_BF16 && chosen()->bf16_kernel) return "oneDNN bf16 matmul";
    static const char *const widened_names[] = {"widened, OpenBLAS sgemm", "widened, oneDNN matmul",
                                                "widened, oneDNN sgemm"};
    Route r = route(transa, transb, 1, 0);
    return operands == DTYPE_BF16 ? widened_names[r] : route_names[r];
}

ProductEngine product_engine(void) {
    const Choice *c = chosen();
    ProductEngine engine = {.isa = c->isa, .chosen_by = c->chosen_by, .parallel = "openmp"};
    if (c->fp32 == ENGINE_OPENBLAS) {
        engine.engine = "OpenBLAS";
        snprintf(engine.kernels, sizeof engine.kernels, "%s", openblas_get_corename());
    } else {
        engine.engine = "oneDNN";
        snprintf(engine.kernels, sizeof engine.kernels, "%s", c->isa);
    }
    if (c->bf16_kernel) {
        dnnl_stream_t stream;
        dnnl_memory_desc_t descs[3];
        dnnl_primitive_t primitive =
            matmul(onednn_engine(&stream), DTYPE_BF16, 'N', 'T', 64, 64, 64, 64, 64, 0, DTYPE_FP32, 64, descs);
        const_dnnl_primitive_desc_t pd;
        const char *impl = "none";
        if (primitive)
            CHECK(dnnl_primitive_get_primitive_desc(primitive, &pd) == dnnl_success &&
                      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success,
                  "oneDNN: a matmul without a name");
        snprintf(engine.bf16_kernels, sizeof engine.bf16_kernels, "oneDNN %s", impl);
        if (primitive) dnnl_primitive_destroy(primitive);
    } else {
        snprintf(engine.bf16_kernels, sizeof engine.bf16_kernels, "widened to fp32, then %s", engine.engine);
    }
    return engine;
}

// OpenBLAS keeps its own thread count; oneDNN takes the OpenMP pool's at each call.
void product_set_threads(int threads) { openblas_set_num_threads(threads); }
