/* SPDX-License-Identifier: MIT */
/*
 * backends/common/store-keys.h: the keys of the job's rendezvous store
 * (core/store_server.c serves it) that more than one part of accel reads or
 * writes, and the prefixes each backend keeps its own keys under, so that
 * no two parts pick the same name.  "accel/job/failed" is part of the
 * plugin ABI (abi/accel/plugin.h, store_get); the others are internal.
 */
#ifndef ACCEL_COMMON_STORE_KEYS_H
#define ACCEL_COMMON_STORE_KEYS_H

/* Set by the store's server when the job can no longer complete (a rank
 * exited before joining, or reported its failure); its value is the
 * message.  Backends that wait outside the store probe it (timeout 0). */
#define ACCEL_STORE_KEY_JOB_FAILED "accel/job/failed"

/* shm: under a namespace NS ("accel/shm" for the world's communicators,
 * "<parent NS>/<n>/g<tag>" for a group split from communicator n), a
 * counter "NS/instances" and "NS/<n>/segment", the name of communicator
 * n's shared segment. */
#define ACCEL_STORE_NS_SHM            "accel/shm"
#define ACCEL_STORE_FMT_SHM_INSTANCES "%s/instances"
#define ACCEL_STORE_FMT_SHM_SEGMENT   "%s/%lld/segment"

/* tcp: "tcp/count/<rank>" counts a rank's world communicators; one with the
 * namespace NS ("tcp/<n>" for the world's n-th, a group's from its tag)
 * keeps "NS/addr/<rank>" (where rank listens) and "NS/gone/<rank>" (why
 * rank closed its connections). */
#define ACCEL_STORE_FMT_TCP_COUNT "tcp/count/%d"
#define ACCEL_STORE_FMT_TCP_NS    "tcp/%lld"
#define ACCEL_STORE_FMT_TCP_ADDR  "%s/addr/%d"
#define ACCEL_STORE_FMT_TCP_GONE  "%s/gone/%d"

/* nccl: "nccl/count/<rank>" counts a rank's communicators, "nccl/uid/<n>"
 * holds communicator n's NCCL unique id. */
#define ACCEL_STORE_FMT_NCCL_COUNT "nccl/count/%d"
#define ACCEL_STORE_FMT_NCCL_UID   "nccl/uid/%lld"

/* mpi and nccl: "<namespace>/reached/<rank>", the last op a rank reached
 * before it timed out (backends/common/coll-missing.h). */
#define ACCEL_STORE_FMT_REACHED "%s/reached/%d"

#endif /* ACCEL_COMMON_STORE_KEYS_H */
