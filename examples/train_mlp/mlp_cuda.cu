/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/mlp_cuda.cu: mlp_cuda.h on cuBLASLt and a few kernels.
 *
 * Row-major products are computed as the column-major products of the
 * transposes (C^T = op(B)^T op(A)^T), so the matrices keep mlp.h's layouts.
 * A layer's forward is one cuBLASLt call with the bias (and, for hidden
 * layers, the ReLU) in its epilogue when cuBLASLt has such a kernel for the
 * shape, else the GEMM and a bias kernel.  Plans (descriptors, layouts and
 * the heuristic's algorithm) are made once per shape and reused.
 *
 * Reductions that feed the model (the bias gradient) are deterministic:
 * fixed partial sums, then a fixed-order sum of the partials.  Only the
 * loss sums (read for the log) are added with atomics. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mlp.h is C without extern "C" of its own (mlp_max_dim is in mlp.c) */
extern "C" {
#include "mlp.h"
}
#include "mlp_cuda.h"
#include "ex_cuda.cuh"

static_assert(MLP_F32 == EX_F32 && MLP_BF16 == EX_BF16 && MLP_F16 == EX_F16,
              "working dtype values");

#define WORKSPACE_BYTES (32u << 20)
#define MAX_PLANS 32
#define COLSUM_ROWS 64   /* rows per partial sum of the bias gradient */

typedef struct plan {
	int used;
	int ta, tb, m, n, k, lda, ldb, ldc, epi;   /* the key (row-major terms) */
	int align;                                 /* of every pointer, bytes    */
	int fused;                                 /* epilogue runs in cuBLASLt */
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
} plan;

struct mlp_cuda {
	mlp_shape shape;
	int cap, device, half;            /* half: MLP_F32, MLP_BF16, MLP_F16  */
	size_t es;                       /* bytes per activation element      */
	cublasLtHandle_t lt;
	void *workspace;
	void *act[MLP_MAX_LAYERS + 1];   /* act[0]: the gathered input         */
	void *dact[2];
	float *colsum;                   /* partial sums of the bias gradient   */
	float *x[2];                     /* data sets (f32) on the device       */
	int64_t *y[2];
	int64_t n[2];
	int dim;
	int64_t *yb;                     /* labels of the batch                 */
	int64_t *idx_dev[2];             /* batch indices, double-buffered      */
	int64_t *idx_host[2];            /* pinned                              */
	cudaEvent_t idx_ev[2];
	int idx_turn;
	cudaStream_t stream;             /* every launch and copy goes here    */
	int own_stream;                  /* stream is ours (non-blocking)       */
	double *sums;                    /* [0] train loss, [1] eval loss, [2] hits */
	plan plans[MAX_PLANS];
	mlp_cuda_fwd_fn hook_fwd;        /* fp8 GEMMs (mlp_cuda_set_gemm_hooks) */
	mlp_cuda_bwd_fn hook_bwd;
	void *hook_user;
	char name[160];
	char err[512];
};

/* ---- errors ------------------------------------------------------------------------------ */

static int fail(mlp_cuda *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->err, sizeof(g->err), fmt, ap);
	va_end(ap);
	return -1;
}

#define CU EX_CU
#define LT EX_LT
#define LAUNCHED EX_LAUNCHED

/* A kernel launch for the work space's dtype (MLP_F32/_BF16/_F16 are
 * EX_F32/_BF16/_F16): KERNEL<T><<<...>>>(ARGS), where ARGS may name T. */
#define LAUNCH_T(g, kernel, grid, block, ...)                                          \
	EX_LAUNCH_T((g)->half, (g)->stream, kernel, grid, block, __VA_ARGS__)

/* ---- kernels ----------------------------------------------------------------------------- */

/* xb[i, :] = x[row_i, :] as T, yb[i] = y[row_i]; row_i = idx[i], or first + i
 * when idx is NULL. */
template <typename T>
__global__ void gather_k(T *xb, int64_t *yb, const float *x, const int64_t *y,
                         const int64_t *idx, int64_t first, int n, int dim)
{
	size_t total = (size_t)n * (size_t)dim;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		size_t i = t / (size_t)dim, j = t % (size_t)dim;
		int64_t row = idx ? idx[i] : first + (int64_t)i;
		st(xb, t, x[(size_t)row * (size_t)dim + j]);
		if (j == 0)
			yb[i] = y[row];
	}
}

/* y[i, j] += b[j], then ReLU when relu (for shapes without a fused epilogue). */
template <typename T>
__global__ void bias_k(T *y, const T *b, int n, int out, int relu)
{
	size_t total = (size_t)n * (size_t)out;
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		float v = ld(y, t) + ld(b, t % (size_t)out);
		st(y, t, relu && !(v > 0.0f) ? 0.0f : v);
	}
}

/* dx = 0 where the ReLU's output x was not positive. */
template <typename T>
__global__ void drelu_k(T *dx, const T *x, size_t total)
{
	for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x)
		if (!(ld(x, t) > 0.0f))
			st(dx, t, 0.0f);
}

/* Partial column sums: part[c, j] = sum of dy[r, j] over rows r of chunk c
 * (COLSUM_ROWS rows), in row order. */
template <typename T>
__global__ void colsum_part_k(float *part, const T *dy, int n, int out)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	int c = blockIdx.y;
	if (j >= out)
		return;
	int r0 = c * COLSUM_ROWS, r1 = min(n, r0 + COLSUM_ROWS);
	float s = 0.0f;
	for (int r = r0; r < r1; r++)
		s += ld(dy, (size_t)r * (size_t)out + (size_t)j);
	part[(size_t)c * (size_t)out + (size_t)j] = s;
}

/* db[j] (+)= sum over chunks of part[c, j], in chunk order. */
template <typename T>
__global__ void colsum_done_k(T *db, const float *part, int chunks, int out, int accumulate)
{
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= out)
		return;
	float s = 0.0f;
	for (int c = 0; c < chunks; c++)
		s += part[(size_t)c * (size_t)out + (size_t)j];
	st(db, j, accumulate ? ld(db, j) + s : s);
}

/* One warp per row of logits z [n, classes]: the loss -log softmax(z)[y]
 * (in double, as mlp.c) times weight added to *loss, the argmax hit added
 * to *hits (when not NULL), and with dz: dz = (softmax - onehot) / denom. */
template <typename T>
__global__ void xent_k(T *dz, const T *z, const int64_t *y, int n, int classes, double denom,
                       double weight, double *loss, double *hits)
{
	int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32);
	int lane = threadIdx.x % 32;
	if (warp >= n)
		return;
	const size_t base = (size_t)warp * (size_t)classes;
	/* max and its first index, as mlp.c's scan */
	float mx = -INFINITY;
	int arg = classes;
	for (int j = lane; j < classes; j += 32) {
		float v = ld(z, base + j);
		if (v > mx || (v == mx && j < arg)) {
			mx = v;
			arg = j;
		}
	}
	for (int o = 16; o > 0; o /= 2) {
		float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
		int a2 = __shfl_xor_sync(0xffffffffu, arg, o);
		if (m2 > mx || (m2 == mx && a2 < arg)) {
			mx = m2;
			arg = a2;
		}
	}
	double sum = 0.0;
	for (int j = lane; j < classes; j += 32)
		sum += exp((double)ld(z, base + j) - (double)mx);
	for (int o = 16; o > 0; o /= 2)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	int64_t label = y[warp];
	if (dz)
		for (int j = lane; j < classes; j += 32) {
			float p = (float)(exp((double)ld(z, base + j) - (double)mx) / sum);
			if (j == label)
				p -= 1.0f;
			st(dz, base + j, (float)(p / denom));
		}
	if (lane == 0) {
		double l = log(sum) - ((double)ld(z, base + label) - (double)mx);
		atomicAdd(loss, weight * l);
		if (hits && arg == label)
			atomicAdd(hits, 1.0);
	}
}

/* ---- cuBLASLt ---------------------------------------------------------------------------- */

/* Column-major layout of a stored row-major matrix of `rows` x `cols`
 * (leading dimension ld), as cuBLASLt sees it: cols x rows. */
static int layout(mlp_cuda *g, cublasLtMatrixLayout_t *l, int rows, int cols, int ldm)
{
	cudaDataType_t t = g->half == MLP_BF16 ? CUDA_R_16BF : g->half == MLP_F16 ? CUDA_R_16F
	                                                                        : CUDA_R_32F;
	LT(g, cublasLtMatrixLayoutCreate(l, t, (uint64_t)cols,
	                                 (uint64_t)rows, ldm));
	return 0;
}

static void plan_free(plan *p)
{
	if (!p->used)
		return;
	cublasLtMatrixLayoutDestroy(p->la);
	cublasLtMatrixLayoutDestroy(p->lb);
	cublasLtMatrixLayoutDestroy(p->lc);
	cublasLtMatmulDescDestroy(p->desc);
	memset(p, 0, sizeof(*p));
}

/* Try to make the plan with epilogue `epi` (cuBLASLt's value); 1 made,
 * 0 no algorithm for it, -1 error. */
static int plan_try(mlp_cuda *g, plan *p, cublasLtEpilogue_t epi)
{
	cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;   /* cuBLASLt's A = our B */
	cublasOperation_t opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	LT(g, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	p->used = 1;
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
	                                     sizeof(opa)));
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
	                                     sizeof(opb)));
	LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
	                                     sizeof(epi)));
	if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
		/* a placeholder; the real bias is set per call */
		const void *bias = g->workspace;
		LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
		                                     sizeof(bias)));
	}
	/* stored shapes (row-major): A is m x k (k x m when ta), B k x n (n x k) */
	if (layout(g, &p->lb, p->ta ? p->k : p->m, p->ta ? p->m : p->k, p->lda) ||
	    layout(g, &p->la, p->tb ? p->n : p->k, p->tb ? p->k : p->n, p->ldb) ||
	    layout(g, &p->lc, p->m, p->n, p->ldc))
		return -1;
	int found;
	LT(g, ex_lt_pick(g->lt, p->desc, p->la, p->lb, p->lc, WORKSPACE_BYTES, (uint32_t)p->align,
	                 &p->algo, &found));
	if (!found) {
		plan_free(p);
		return 0;
	}
	return 1;
}

static void plan_key(plan *p, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc,
                     int epi, int align)
{
	memset(p, 0, sizeof(*p));
	p->align = align;
	p->ta = ta;
	p->tb = tb;
	p->m = m;
	p->n = n;
	p->k = k;
	p->lda = lda;
	p->ldb = ldb;
	p->ldc = ldc;
	p->epi = epi;
}

/* C[m, n] = op(A) op(B) + beta C (row-major), with epi: 0 none, 1 + bias,
 * 2 + bias then ReLU (bias: n values). */
static int gemm(mlp_cuda *g, int ta, int tb, int m, int n, int k, const void *A, int lda,
                const void *B, int ldb, float beta, void *C, int ldc, int epi, const void *bias)
{
	plan *p = NULL;
	/* the largest power of two up to 256 dividing every address */
	uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (epi ? (uintptr_t)bias : 0) |
	                 256u;
	int align = (int)(bits & (~bits + 1));
	for (int i = 0; i < MAX_PLANS && !p; i++) {
		plan *q = &g->plans[i];
		if (q->used && q->ta == ta && q->tb == tb && q->m == m && q->n == n && q->k == k &&
		    q->lda == lda && q->ldb == ldb && q->ldc == ldc && q->epi == epi &&
		    q->align == align)
			p = q;
	}
	if (!p) {
		for (int i = 0; i < MAX_PLANS && !p; i++)
			if (!g->plans[i].used)
				p = &g->plans[i];
		if (!p)
			return fail(g, "more than %d GEMM shapes", MAX_PLANS);
		plan_key(p, ta, tb, m, n, k, lda, ldb, ldc, epi, align);
		int made = 0;
		if (epi) {
			made = plan_try(g, p, epi == 2 ? CUBLASLT_EPILOGUE_RELU_BIAS
			                               : CUBLASLT_EPILOGUE_BIAS);
			p->fused = made == 1;
		}
		if (made == 0) {
			plan_key(p, ta, tb, m, n, k, lda, ldb, ldc, epi, align);
			made = plan_try(g, p, CUBLASLT_EPILOGUE_DEFAULT);
		}
		if (made < 0)
			return -1;
		if (made == 0)
			return fail(g, "cuBLASLt has no algorithm for a %s GEMM of %d x %d x %d",
			            ex_dtype_name(g->half), m, n, k);
		p->used = 1;
	}
	if (p->fused)
		LT(g, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
		                                     sizeof(bias)));
	float alpha = 1.0f;
	LT(g, cublasLtMatmul(g->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc,
	                     &p->algo, g->workspace, WORKSPACE_BYTES, g->stream));
	if (epi && !p->fused) {
		size_t total = (size_t)m * (size_t)n;
		unsigned nb = ex_blocks_for(total, 256);
		LAUNCH_T(g, bias_k, nb, 256, (T *)C, (const T *)bias, m, n, epi == 2);
		LAUNCHED(g, "bias kernel");
	}
	return 0;
}

/* ---- the API ----------------------------------------------------------------------------- */

extern "C" int mlp_cuda_device_count(void)
{
	return ex_device_count();
}

extern "C" const char *mlp_cuda_error(const mlp_cuda *g)
{
	return g ? g->err : "no CUDA work space";
}

extern "C" const char *mlp_cuda_name(const mlp_cuda *g)
{
	return g->name;
}

extern "C" void mlp_cuda_free(mlp_cuda *g)
{
	if (!g)
		return;
	cudaSetDevice(g->device);
	cudaDeviceSynchronize();
	if (g->own_stream)
		cudaStreamDestroy(g->stream);
	for (int i = 0; i < MAX_PLANS; i++)
		plan_free(&g->plans[i]);
	if (g->lt)
		cublasLtDestroy(g->lt);
	for (int l = 0; l <= MLP_MAX_LAYERS; l++)
		cudaFree(g->act[l]);
	for (int i = 0; i < 2; i++) {
		cudaFree(g->dact[i]);
		cudaFree(g->x[i]);
		cudaFree(g->y[i]);
		cudaFree(g->idx_dev[i]);
		cudaFreeHost(g->idx_host[i]);
		if (g->idx_ev[i])
			cudaEventDestroy(g->idx_ev[i]);
	}
	cudaFree(g->colsum);
	cudaFree(g->yb);
	cudaFree(g->sums);
	cudaFree(g->workspace);
	free(g);
}

static int upload_set(mlp_cuda *g, int k, const mlp_data *d)
{
	g->n[k] = d ? d->n : 0;
	if (!d || d->n == 0)
		return 0;
	size_t xb = (size_t)d->n * (size_t)d->dim * sizeof(float), yb = (size_t)d->n * 8;
	CU(g, cudaMalloc((void **)&g->x[k], xb));
	CU(g, cudaMalloc((void **)&g->y[k], yb));
	CU(g, cudaMemcpy(g->x[k], d->x, xb, cudaMemcpyHostToDevice));
	CU(g, cudaMemcpy(g->y[k], d->y, yb, cudaMemcpyHostToDevice));
	return 0;
}

static int setup(mlp_cuda *g, const mlp_data *train, const mlp_data *test)
{
	const mlp_shape *s = &g->shape;
	size_t cap = (size_t)g->cap;
	int maxd = mlp_max_dim(s);
	cudaDeviceProp prop;
	CU(g, cudaSetDevice(g->device));
	CU(g, cudaGetDeviceProperties(&prop, g->device));
	snprintf(g->name, sizeof(g->name), "cuBLASLt %s%s on cuda:%d (%s)", ex_dtype_name(g->half),
	         g->half != MLP_F32 ? " (f32 accumulation)" : "", g->device, prop.name);
	LT(g, cublasLtCreate(&g->lt));
	CU(g, cudaMalloc(&g->workspace, WORKSPACE_BYTES));
	for (int l = 0; l <= s->n_layers; l++)
		CU(g, cudaMalloc(&g->act[l], cap * (size_t)s->dims[l] * g->es));
	for (int i = 0; i < 2; i++) {
		CU(g, cudaMalloc(&g->dact[i], cap * (size_t)maxd * g->es));
		CU(g, cudaMalloc((void **)&g->idx_dev[i], cap * 8));
		CU(g, cudaMallocHost((void **)&g->idx_host[i], cap * 8));
		CU(g, cudaEventCreateWithFlags(&g->idx_ev[i], cudaEventDisableTiming));
	}
	size_t chunks = (cap + COLSUM_ROWS - 1) / COLSUM_ROWS;
	CU(g, cudaMalloc((void **)&g->colsum, chunks * (size_t)maxd * sizeof(float)));
	CU(g, cudaMalloc((void **)&g->yb, cap * 8));
	CU(g, cudaMalloc((void **)&g->sums, 3 * sizeof(double)));
	CU(g, cudaMemset(g->sums, 0, 3 * sizeof(double)));
	g->dim = s->dims[0];
	if (upload_set(g, 0, train) || upload_set(g, 1, test))
		return -1;
	/* the set-up ran on the legacy stream (cudaMemcpy of pageable memory
	 * may return before its DMA lands): done before a non-blocking stream
	 * can read it */
	CU(g, cudaDeviceSynchronize());
	return 0;
}

extern "C" int mlp_cuda_new(const mlp_shape *s, int cap, int device, int half,
                            const mlp_data *train, const mlp_data *test, mlp_cuda **ret,
                            char *err, size_t errcap)
{
	*ret = NULL;
	mlp_cuda *g = (mlp_cuda *)calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errcap, "out of memory");
		return -1;
	}
	g->shape = *s;
	g->cap = cap;
	g->device = device;
	if (half != MLP_F32 && half != MLP_BF16 && half != MLP_F16) {
		snprintf(err, errcap, "working dtype %d is not f32, bf16 or f16", half);
		free(g);
		return -1;
	}
	g->half = half;
	g->es = half != MLP_F32 ? 2 : 4;
	if (setup(g, train, test)) {
		snprintf(err, errcap, "%s", g->err);
		mlp_cuda_free(g);
		return -1;
	}
	*ret = g;
	return 0;
}

static int gather(mlp_cuda *g, const int64_t *idx_dev, int set, int64_t first, int n)
{
	size_t total = (size_t)n * (size_t)g->dim;
	unsigned nb = ex_blocks_for(total, 256);
	LAUNCH_T(g, gather_k, nb, 256, (T *)g->act[0], g->yb, g->x[set], g->y[set], idx_dev, first,
	         n, g->dim);
	LAUNCHED(g, "gather kernel");
	return 0;
}

extern "C" int mlp_cuda_load_batch(mlp_cuda *g, const int64_t *idx, int n)
{
	if (n < 1 || n > g->cap)
		return fail(g, "batch of %d samples (1 .. %d)", n, g->cap);
	for (int i = 0; i < n; i++)
		if (idx[i] < 0 || idx[i] >= g->n[0])
			return fail(g, "sample index %lld out of range (%lld samples)", (long long)idx[i],
			            (long long)g->n[0]);
	/* Two pinned buffers: the host fills one while the copy from the other
	 * may still be queued; the event says when a buffer is free again. */
	int k = g->idx_turn;
	g->idx_turn ^= 1;
	CU(g, cudaEventSynchronize(g->idx_ev[k]));
	memcpy(g->idx_host[k], idx, (size_t)n * 8);
	CU(g, cudaMemcpyAsync(g->idx_dev[k], g->idx_host[k], (size_t)n * 8,
	                      cudaMemcpyHostToDevice, g->stream));
	CU(g, cudaEventRecord(g->idx_ev[k], g->stream));
	return gather(g, g->idx_dev[k], 0, 0, n);
}

extern "C" int mlp_cuda_load_slice(mlp_cuda *g, int set, int64_t first, int n)
{
	if (set < 0 || set > 1 || n < 1 || n > g->cap || first < 0 || first + n > g->n[set])
		return fail(g, "slice %lld + %d of set %d out of range", (long long)first, n, set);
	return gather(g, NULL, set, first, n);
}

extern "C" int mlp_cuda_forward_layer(mlp_cuda *g, int l, const void *W, const void *b, int n)
{
	const mlp_shape *s = &g->shape;
	int in = s->dims[l], out = s->dims[l + 1];
	int h = g->hook_fwd ? g->hook_fwd(g->hook_user, l, g->act[l], g->act[l + 1], n) : 1;
	if (h < 0)
		return fail(g, "the fp8 GEMM of fc%d failed", l);
	if (h == 0) {   /* the GEMM was the hook's: bias and ReLU here */
		bias_k<<<ex_blocks_for((size_t)n * out, 256), 256, 0, g->stream>>>(
		        (float *)g->act[l + 1], (const float *)b, n, out, l < s->n_layers - 1);
		LAUNCHED(g, "bias kernel");
		return 0;
	}
	/* y[n, out] = x[n, in] W[out, in]^T + b, ReLU unless last */
	return gemm(g, 0, 1, n, out, in, g->act[l], in, W, in, 0.0f, g->act[l + 1], out,
	            l < s->n_layers - 1 ? 2 : 1, b);
}

static int xent(mlp_cuda *g, int n, double denom, double weight, int grad)
{
	const mlp_shape *s = &g->shape;
	int c = s->dims[s->n_layers];
	unsigned threads = 256, blocks = (unsigned)(((size_t)n * 32 + threads - 1) / threads);
	double *loss = grad ? &g->sums[0] : &g->sums[1], *hits = grad ? NULL : &g->sums[2];
	LAUNCH_T(g, xent_k, blocks, threads, grad ? (T *)g->dact[0] : NULL,
	         (const T *)g->act[s->n_layers], g->yb, n, c, denom, weight, loss, hits);
	LAUNCHED(g, "cross-entropy kernel");
	return 0;
}

extern "C" int mlp_cuda_loss(mlp_cuda *g, int n, double denom, double weight)
{
	return xent(g, n, denom, weight, 1);
}

extern "C" int mlp_cuda_eval(mlp_cuda *g, int n)
{
	return xent(g, n, 1.0, 1.0, 0);
}

extern "C" int mlp_cuda_backward_layer(mlp_cuda *g, int l, const void *W, void *dW, void *db,
                                       int n, int accumulate)
{
	const mlp_shape *s = &g->shape;
	int in = s->dims[l], out = s->dims[l + 1];
	int cur = (s->n_layers - 1 - l) & 1;   /* as mlp.c: layers alternate buffers */
	const void *dy = g->dact[cur];
	void *dx = g->dact[cur ^ 1];
	int h = g->hook_bwd ? g->hook_bwd(g->hook_user, l, dy, l ? dx : NULL, dW, n, accumulate) : 1;
	if (h < 0)
		return fail(g, "the fp8 GEMMs of fc%d's backward failed", l);
	/* dW[out, in] (+)= dY[n, out]^T X[n, in] */
	if (h && gemm(g, 1, 0, out, in, n, dy, out, g->act[l], in, accumulate ? 1.0f : 0.0f, dW, in,
	              0, NULL))
		return -1;
	/* db (+)= column sums of dY */
	unsigned chunks = (unsigned)((n + COLSUM_ROWS - 1) / COLSUM_ROWS);
	dim3 grid((unsigned)((out + 127) / 128), chunks);
	LAUNCH_T(g, colsum_part_k, grid, 128, g->colsum, (const T *)dy, n, out);
	LAUNCH_T(g, colsum_done_k, (out + 127) / 128, 128, (T *)db, g->colsum, (int)chunks, out,
	         accumulate);
	LAUNCHED(g, "bias gradient kernels");
	if (l == 0)
		return 0;
	/* dX[n, in] = dY[n, out] W[out, in], then through fc{l-1}'s ReLU */
	if (h && gemm(g, 0, 0, n, in, out, dy, out, W, in, 0.0f, dx, in, 0, NULL))
		return -1;
	size_t total = (size_t)n * (size_t)in;
	unsigned nb = ex_blocks_for(total, 256);
	LAUNCH_T(g, drelu_k, nb, 256, (T *)dx, (const T *)g->act[l], total);
	LAUNCHED(g, "ReLU gradient kernel");
	return 0;
}

extern "C" int mlp_cuda_set_gemm_hooks(mlp_cuda *g, mlp_cuda_fwd_fn fwd, mlp_cuda_bwd_fn bwd,
                                       void *user)
{
	if (g->half != MLP_F32 && (fwd || bwd))
		return fail(g, "GEMM hooks need f32 activations");
	g->hook_fwd = fwd;
	g->hook_bwd = bwd;
	g->hook_user = user;
	return 0;
}

extern "C" int mlp_cuda_alloc(mlp_cuda *g, size_t bytes, void **ret)
{
	CU(g, cudaSetDevice(g->device));
	CU(g, cudaMalloc(ret, bytes ? bytes : 1));
	return 0;
}

extern "C" void mlp_cuda_free_mem(void *p)
{
	cudaFree(p);
}

extern "C" int mlp_cuda_sync(mlp_cuda *g)
{
	CU(g, cudaDeviceSynchronize());
	return 0;
}

extern "C" int mlp_cuda_use_stream(mlp_cuda *g, int own)
{
	return ex_use_stream(g, own);
}

extern "C" void *mlp_cuda_stream(const mlp_cuda *g)
{
	return g ? (void *)g->stream : NULL;
}

/* n bytes at device src into host dst, on the stream, waited for. */
static int read_back(mlp_cuda *g, void *dst, const void *src, size_t n)
{
	CU(g, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g->stream));
	CU(g, cudaStreamSynchronize(g->stream));
	return 0;
}

extern "C" int mlp_cuda_take_train_loss(mlp_cuda *g, double *ret_train)
{
	double v = 0;
	if (read_back(g, &v, &g->sums[0], sizeof(v)))
		return -1;
	CU(g, cudaMemsetAsync(&g->sums[0], 0, sizeof(double), g->stream));
	if (ret_train)
		*ret_train = v;
	return 0;
}

extern "C" int mlp_cuda_take_eval(mlp_cuda *g, double *ret_loss, double *ret_hits)
{
	double v[2] = {0, 0};
	if (read_back(g, v, &g->sums[1], sizeof(v)))
		return -1;
	CU(g, cudaMemsetAsync(&g->sums[1], 0, 2 * sizeof(double), g->stream));
	if (ret_loss)
		*ret_loss = v[0];
	if (ret_hits)
		*ret_hits = v[1];
	return 0;
}

extern "C" int mlp_cuda_to_host(mlp_cuda *g, float *dst, const void *src, size_t n)
{
	if (g->half == MLP_F32)
		return read_back(g, dst, src, n * sizeof(float));
	uint16_t *tmp = (uint16_t *)malloc(n ? n * 2 : 1);
	if (!tmp)
		return fail(g, "out of memory");
	if (read_back(g, tmp, src, n * 2)) {
		free(tmp);
		return -1;
	}
	for (size_t i = 0; i < n; i++)   /* exact: f32 holds every bf16/f16 value */
		dst[i] = mlp_from_half(tmp[i], g->half);
	free(tmp);
	return 0;
}
