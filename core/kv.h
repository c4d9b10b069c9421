/* SPDX-License-Identifier: MIT */
/* core/kv.h: an in-process key-value map (private): the rendezvous store of
 * a job that has no rendezvous server (world size 1 without a launcher). */
#ifndef ACCEL_CORE_KV_H
#define ACCEL_CORE_KV_H

#include <stdint.h>

#include "error.h"

typedef struct accel_kv accel_kv;

int accelp_kv_new(accel_kv **ret_kv);
accel_kv *accelp_kv_free(accel_kv *kv);
int accelp_kv_set(accel_kv *kv, const char *key, const void *value, uint64_t len, accel_err *err);
/* No waiting: with one process nobody else can set the key later. */
int accelp_kv_get(accel_kv *kv, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
                 accel_err *err);
int accelp_kv_add(accel_kv *kv, const char *key, int64_t delta, int64_t *ret_value, accel_err *err);

#endif
