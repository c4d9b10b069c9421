/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/blas.c: blas.h over the library chosen at build time.
 *
 * CBLAS is declared here rather than included: the BLIS and OpenBLAS packages
 * put their cblas.h in library-specific directories, and the CBLAS calling
 * convention (int enums, int dimensions in the LP64 builds Debian ships) is
 * the same for both. */
#include <stdio.h>
#include <stdlib.h>

#include "blas.h"

#if defined(TRAIN_MLP_BLAS_DNNL)

#include <dnnl.h>
#include <omp.h>

void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	/* dnnl_sgemm is row-major already. */
	dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
	                              lda, b, ldb, beta, c, ldc);
	if (st != dnnl_success) {
		/* Only bad arguments can fail, i.e. a bug in this program. */
		fprintf(stderr, "train_mlp: dnnl_sgemm(%d, %d, %d) failed with status %d\n", m, n, k,
		        (int)st);
		abort();
	}
}

void blas_single_thread(void)
{
	omp_set_num_threads(1);
}

const char *blas_name(void)
{
	return "dnnl";
}

#elif defined(TRAIN_MLP_BLAS_BUILTIN)

/* Portable loops, for machines without a BLAS (a CUDA machine that runs
 * --device cuda needs the CPU path only for small reference runs).  Rows
 * of C are accumulated in k order with the inner loop over contiguous
 * columns, which compilers vectorise. */
void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	for (int i = 0; i < m; i++) {
		float *ci = c + (size_t)i * (size_t)ldc;
		if (trans_b && !trans_a) {   /* rows of A against rows of B */
			const float *ai = a + (size_t)i * (size_t)lda;
			for (int j = 0; j < n; j++) {
				const float *bj = b + (size_t)j * (size_t)ldb;
				float s = 0.0f;
				for (int p = 0; p < k; p++)
					s += ai[p] * bj[p];
				ci[j] = alpha * s + (beta == 0.0f ? 0.0f : beta * ci[j]);
			}
			continue;
		}
		for (int j = 0; j < n; j++)
			ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
		for (int p = 0; p < k; p++) {
			float aip = alpha * (trans_a ? a[(size_t)p * (size_t)lda + (size_t)i]
			                             : a[(size_t)i * (size_t)lda + (size_t)p]);
			for (int j = 0; j < n; j++)
				ci[j] += aip * (trans_b ? b[(size_t)j * (size_t)ldb + (size_t)p]
				                        : b[(size_t)p * (size_t)ldb + (size_t)j]);
		}
	}
}

void blas_single_thread(void)
{
}

const char *blas_name(void)
{
	return "builtin";
}

#else /* CBLAS */

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	cblas_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
	            trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c,
	            ldc);
}

#if defined(TRAIN_MLP_BLAS_OPENBLAS)
void openblas_set_num_threads(int n);
void blas_single_thread(void)
{
	openblas_set_num_threads(1);
}
const char *blas_name(void)
{
	return "openblas";
}
#elif defined(TRAIN_MLP_BLAS_BLIS)
#include <stdint.h>
void bli_thread_set_num_threads(int64_t n);
void blas_single_thread(void)
{
	bli_thread_set_num_threads(1);
}
const char *blas_name(void)
{
	return "blis";
}
#else
#error "define TRAIN_MLP_BLAS_OPENBLAS, _BLIS, _DNNL or _BUILTIN"
#endif

#endif
