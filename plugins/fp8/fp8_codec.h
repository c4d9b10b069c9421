/* SPDX-License-Identifier: MIT */
/*
 * plugins/fp8/fp8_codec.h: E4M3 and E5M2 on the CPU (the OCP FP8 formats
 * that Hopper and Ada tensor cores and TransformerEngine use).
 *
 *   E4M3: bias 7, 3 mantissa bits, no infinities; 0x7f and 0xff are NaN;
 *         largest finite 448 (0x7e), smallest subnormal 2^-9.
 *   E5M2: bias 15, 2 mantissa bits, IEEE-like: 0x7c is +inf, 0x7d..0x7f
 *         NaN; largest finite 57344 (0x7b), smallest subnormal 2^-16.
 *
 * Encoding multiplies by the scale in f32 first (x * scale, rounded as f32,
 * as TransformerEngine's cast kernels do), then rounds to the nearest code,
 * ties to even, and saturates: every value above the largest finite one,
 * infinities included, becomes +-max (CUDA's __NV_SATFINITE, what
 * TransformerEngine casts with).  NaN encodes as 0x7f in both formats (what
 * __nv_cvt_float_to_fp8 returns).  -0 keeps its sign (0x80).
 */
#ifndef ACCEL_FP8_CODEC_H
#define ACCEL_FP8_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f

/* fmt: ACCEL_DTYPE_F8E4M3 or ACCEL_DTYPE_F8E5M2 (accel/types.h). */
float fp8_max(uint32_t fmt);
uint8_t fp8_encode(uint32_t fmt, float x);
float fp8_decode(uint32_t fmt, uint8_t code);

/* q[i] = encode(x[i] * scale); returns max |x[i]| over the finite and
 * non-finite inputs alike (a NaN input makes it NaN, an infinite one inf),
 * the amax the delayed-scaling recipe records.  q may be NULL (amax only). */
float fp8_quantize_f32(uint32_t fmt, const float *x, size_t n, float scale, uint8_t *q);
/* The same from bf16 (uint16_t bits) and f16 inputs. */
float fp8_quantize_bf16(uint32_t fmt, const uint16_t *x, size_t n, float scale, uint8_t *q);
float fp8_quantize_f16(uint32_t fmt, const uint16_t *x, size_t n, float scale, uint8_t *q);
/* Quantize the transpose: x is [rows, cols] row-major, qt receives
 * [cols, rows] row-major (the second operand layout a TN GEMM needs). */
void fp8_quantize_t_f32(uint32_t fmt, const float *x, size_t rows, size_t cols, float scale,
                        uint8_t *qt);
/* y[i] = decode(q[i]) * scale_inv. */
void fp8_dequantize_f32(uint32_t fmt, const uint8_t *q, size_t n, float scale_inv, float *y);

/* f16 / bf16 bits to f32 (exact). */
float fp8_bf16_to_f32(uint16_t b);
float fp8_f16_to_f32(uint16_t h);

#endif
