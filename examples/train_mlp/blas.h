/* SPDX-License-Identifier: MIT */
/* examples/train_mlp/blas.h: the one GEMM the MLP needs, over the BLAS chosen
 * at build time (meson option example_blas: OpenBLAS, BLIS through CBLAS, or
 * oneDNN's dnnl_sgemm).  Row-major, single precision. */
#ifndef TRAIN_MLP_BLAS_H
#define TRAIN_MLP_BLAS_H

/* C[m,n] = alpha * op(A) . op(B) + beta * C, all row-major; op(A) is [m,k]
 * (A is stored [k,m] when trans_a), op(B) is [k,n] (B stored [n,k] when
 * trans_b).  Leading dimensions are those of the stored matrices. */
void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Use one thread inside the BLAS (one process per core runs the example);
 * call before the first GEMM. */
void blas_single_thread(void);

/* "openblas", "blis" or "dnnl". */
const char *blas_name(void);

#endif
