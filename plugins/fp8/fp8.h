/* SPDX-License-Identifier: MIT */
/* plugins/fp8/fp8.h: the fp8 plugin's state, shared by its files. */
#ifndef ACCEL_FP8_PLUGIN_H
#define ACCEL_FP8_PLUGIN_H

#include <stdint.h>

#include "accel/plugin.h"
#include "accel-fp8.h"
#include "fp8_cuda_api.h"

/* One parameter whose GEMMs run in fp8 (compute_dtype f8e4m3/f8e5m2). */
typedef struct fp8_param {
	uint32_t index;            /* in the model                               */
	uint32_t unit;
	uint32_t fmt_fwd;          /* X and W: the compute dtype                 */
	uint32_t fmt_bwd;          /* dY: E5M2 (HYBRID) or E4M3                  */
	uint64_t out, in;          /* W is [out, in]                             */
	int32_t device, device_index;
	float *history;            /* host, hist_len x ACCEL_FP8_OPERANDS        */
	float scale[ACCEL_FP8_OPERANDS];
	float amax[ACCEL_FP8_OPERANDS];   /* this step's, host (CPU operands)    */
	float *amax_dev;           /* the same on the device (CUDA operands): its
	                              3 floats of fp8_state.amax_dev              */
	uint8_t *wq, *wtq;         /* W and W^T quantized (in pre_forward), on
	                              the parameter's device                       */
	int32_t ready;             /* wq/wtq hold this forward's weights         */
} fp8_param;

typedef struct fp8_state {
	accel_fp8_gemm_v1 table;   /* first: the extension table is the state   */
	const accel_host_v1 *host;
	accel_host *h;
	accel_world_v1 world;
	/* config */
	int32_t margin;
	int64_t interval;
	uint32_t hybrid;           /* fp8_format HYBRID: dY in E5M2              */
	uint32_t hist_len;
	uint32_t algo;             /* FP8_ALGO_*                                 */
	/* parameters, found in the first unit hook (or load/save_state) */
	int32_t set_up;
	uint32_t n_fp8;
	fp8_param *p;              /* n_fp8                                     */
	int32_t *slot;             /* model param index -> p index, or -1        */
	uint32_t n_model_params;
	float *red;                /* n_fp8 * 3 host floats for the all-reduce   */
	float *amax_dev;           /* n_fp8 * 3 device floats, every CUDA
	                              parameter's amax (one read per step)       */
	float *amax_host;          /* n_fp8 * 3 host floats: its copy, zeros     */
	/* CUDA part (NULL when this process emulates) */
	void *cuda_dl;
	const fp8_cuda_api *cuda;
	fp8_cuda_ctx *cctx;
	int32_t cuda_device;
	int32_t cc;
} fp8_state;

/* fp8.c */
int fp8_setup(fp8_state *s);
/* dlopen fp8-cuda/fp8-cuda.so next to this plugin; 0 with *ret_api NULL
 * when it is not there or cannot load (why in why[cap]). */
int fp8_cuda_open(void **ret_dl, const fp8_cuda_api **ret_api, char *why, size_t cap);

/* fp8_gemm.c: the extension table's functions */
void fp8_gemm_table_init(fp8_state *s);
/* Quantize W of p into p->wq / p->wtq with its scale; record amax(W). */
int fp8_quantize_weight(fp8_state *s, fp8_param *p, const accel_view *w);
/* Emulated GEMM on host memory (the reference that tests compare to). */
void fp8_gemm_emulate(uint64_t m, uint64_t n, uint64_t k, const uint8_t *a, uint32_t afmt,
                      float a_scale_inv, const uint8_t *b, uint32_t bfmt, float b_scale_inv,
                      float alpha, float *d, int accumulate);

#endif
