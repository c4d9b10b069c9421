/* SPDX-License-Identifier: MIT */
/*
 * accel/types.h: the vocabulary shared by libaccel, plugins and comm backends.
 *
 * Plain C99, no dependency beyond <stdint.h> and <stddef.h>.  Everything here
 * is part of the stable ABI: constants are never renumbered, structs are
 * append-only and start with `uint32_t struct_size`, and no C enum, bool or
 * bitfield appears in an ABI struct (their size is up to the compiler).
 */
#ifndef ACCEL_TYPES_H
#define ACCEL_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version.  The major is in the entry symbol names
 * (accel_plugin_entry_v1, accel_comm_entry_v1); a new major is a new symbol.
 * The minor grows when members are appended to a struct; readers check
 * struct_size before touching a member that a newer minor appended. */
#define ACCEL_ABI_MAJOR 1
#define ACCEL_ABI_MINOR 7

/* Export marker for the one entry symbol of a plugin or backend.  Build
 * plugins with -fvisibility=hidden; this re-exports only the entry. */
#if defined(_WIN32)
#define ACCEL_EXPORT __declspec(dllexport)
#else
#define ACCEL_EXPORT __attribute__((visibility("default")))
#endif

/* printf-format checking where the compiler has it. */
#if defined(__GNUC__)
#define ACCEL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define ACCEL_PRINTF(fmt, args)
#endif

/* ---- status codes ------------------------------------------------------ */
/* Every fallible call returns ACCEL_OK or one of these negative codes.  The
 * text that explains a failure travels separately (accel_host_v1.error on
 * the plugin side, accel_errmsg() on the user side). */
#define ACCEL_OK                   0
#define ACCEL_ERR_INVALID_ARG    (-1)  /* a caller passed a bad value        */
#define ACCEL_ERR_NOMEM          (-2)  /* an allocation failed               */
#define ACCEL_ERR_CONFIG         (-3)  /* configuration is wrong             */
#define ACCEL_ERR_ABI            (-4)  /* plugin/backend ABI mismatch        */
#define ACCEL_ERR_SYSTEM         (-5)  /* an OS call failed (errno given)    */
#define ACCEL_ERR_COMM           (-6)  /* a collective failed                */
#define ACCEL_ERR_TIMEOUT        (-7)  /* something did not arrive in time   */
#define ACCEL_ERR_CUDA           (-8)  /* a CUDA runtime/driver call failed  */
#define ACCEL_ERR_NCCL           (-9)  /* an NCCL call failed                */
#define ACCEL_ERR_UNSUPPORTED   (-10)  /* valid request this build can't do  */
#define ACCEL_ERR_PLUGIN        (-11)  /* a plugin file is unusable          */
#define ACCEL_ERR_STATE         (-12)  /* call out of order (e.g. step before prepare) */
#define ACCEL_ERR_IO            (-13)  /* file read/write failed             */
#define ACCEL_ERR_NOT_FOUND     (-14)  /* named thing does not exist         */
#define ACCEL_ERR_PEER          (-15)  /* a peer process died or left        */
#define ACCEL_ERR_CHECKPOINT    (-16)  /* checkpoint missing/corrupt/incompatible */
#define ACCEL_ERR_USAGE         (-17)  /* bad command-line usage             */
#define ACCEL_ERR_INTERNAL      (-18)  /* a bug in accel: please report      */

/* Whether the struct that `ptr` points at (of type `type`, a caller's or
 * a callee's of another minor) covers `member`: read a member appended in
 * a later minor only when this holds. */
#define ACCEL_STRUCT_HAS(ptr, type, member) \
	((ptr)->struct_size >= offsetof(type, member) + sizeof(((const type *)0)->member))

/* ---- data types ---------------------------------------------------------- */
#define ACCEL_DTYPE_INVALID 0
#define ACCEL_DTYPE_F32     1
#define ACCEL_DTYPE_F64     2
#define ACCEL_DTYPE_F16     3
#define ACCEL_DTYPE_BF16    4
#define ACCEL_DTYPE_F8E4M3  5
#define ACCEL_DTYPE_F8E5M2  6
#define ACCEL_DTYPE_I32     7
#define ACCEL_DTYPE_I64     8
#define ACCEL_DTYPE_U8      9
#define ACCEL_DTYPE_COUNT  10

/* Bytes per element of an ACCEL_DTYPE_* (0 for an unknown value) and its
 * short name ("f32", ...; "invalid" for an unknown value).  Header-only:
 * plugins and backends do not link libaccel. */
static inline size_t accel_abi_dtype_size(uint32_t dtype)
{
	static const unsigned char size[ACCEL_DTYPE_COUNT] = {0, 4, 8, 2, 2, 1, 1, 4, 8, 1};
	return dtype < ACCEL_DTYPE_COUNT ? size[dtype] : 0;
}

static inline const char *accel_abi_dtype_name(uint32_t dtype)
{
	static const char *const name[ACCEL_DTYPE_COUNT] = {
		"invalid", "f32", "f64", "f16", "bf16", "f8e4m3", "f8e5m2", "i32", "i64", "u8"};
	return dtype < ACCEL_DTYPE_COUNT ? name[dtype] : "invalid";
}

/* ---- devices --------------------------------------------------------------- */
#define ACCEL_DEVICE_CPU  0
#define ACCEL_DEVICE_CUDA 1

/* ---- reductions ---------------------------------------------------------- */
#define ACCEL_RED_SUM 0
#define ACCEL_RED_AVG 1   /* sum divided by the world size */
#define ACCEL_RED_MAX 2
#define ACCEL_RED_MIN 3

/* ---- log levels ---------------------------------------------------------- */
#define ACCEL_LOG_ERROR 0
#define ACCEL_LOG_WARN  1
#define ACCEL_LOG_INFO  2
#define ACCEL_LOG_DEBUG 3
#define ACCEL_LOG_TRACE 4

/* ---- memory categories (accounting; see accel_host_v1.mem_alloc) ---------- */
#define ACCEL_MEM_PARAMS    0  /* working-dtype parameters          */
#define ACCEL_MEM_GRADS     1  /* gradients (incl. buckets)          */
#define ACCEL_MEM_MASTER    2  /* fp32 master weights                */
#define ACCEL_MEM_OPTIMIZER 3  /* optimizer state (moments, momentum) */
#define ACCEL_MEM_BUFFERS   4  /* staging, gather and scratch buffers */
#define ACCEL_MEM_OFFLOAD   5  /* host copies of offloaded state      */
#define ACCEL_MEM_CATEGORY_COUNT 6

/* Flags for accel_host_v1.mem_alloc. */
#define ACCEL_MEMF_ZERO   (1u << 0)  /* zero-filled                                  */
#define ACCEL_MEMF_COMM   (1u << 1)  /* from the comm backend: collectives on it need
                                        no staging copy (shared memory on shm,
                                        registered device memory on nccl)          */
#define ACCEL_MEMF_PINNED (1u << 2)  /* page-locked host memory (CUDA builds)        */

/*
 * A view of a flat, contiguous range of elements.  Views do not own memory.
 * Every device op and collective takes views so that a strategy can work on
 * any shard: `data` points at the first element of the range.
 */
typedef struct accel_view {
	uint32_t struct_size;   /* sizeof(accel_view)                         */
	uint32_t dtype;         /* ACCEL_DTYPE_*                              */
	int32_t device;         /* ACCEL_DEVICE_*                             */
	int32_t device_index;   /* CUDA ordinal; 0 for CPU                    */
	void *data;             /* first element; may be NULL iff numel == 0  */
	uint64_t numel;         /* number of elements                         */
} accel_view;

#ifdef __cplusplus
}
#endif

#endif /* ACCEL_TYPES_H */
