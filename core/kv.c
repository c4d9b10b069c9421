/* SPDX-License-Identifier: MIT */
/* core/kv.c: in-process key-value map. */
#include <stdlib.h>
#include <string.h>

#include "kv.h"

typedef struct kv_entry {
	struct kv_entry *next;
	char *key;
	void *value;
	uint64_t len;
} kv_entry;

struct accel_kv {
	kv_entry *head;
};

int accelp_kv_new(accel_kv **ret_kv)
{
	accel_kv *kv = calloc(1, sizeof(*kv));
	if (!kv)
		return ACCEL_ERR_NOMEM;
	*ret_kv = kv;
	return ACCEL_OK;
}

accel_kv *accelp_kv_free(accel_kv *kv)
{
	if (!kv)
		return NULL;
	for (kv_entry *e = kv->head, *n; e; e = n) {
		n = e->next;
		free(e->key);
		free(e->value);
		free(e);
	}
	free(kv);
	return NULL;
}

static kv_entry *find(accel_kv *kv, const char *key)
{
	for (kv_entry *e = kv->head; e; e = e->next)
		if (!strcmp(e->key, key))
			return e;
	return NULL;
}

int accelp_kv_set(accel_kv *kv, const char *key, const void *value, uint64_t len, accel_err *err)
{
	void *copy = malloc(len ? len : 1);
	if (!copy)
		return accelp_err_set(err, ACCEL_ERR_NOMEM, "store: out of memory");
	if (len)
		memcpy(copy, value, len);
	kv_entry *e = find(kv, key);
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e || !(e->key = strdup(key))) {
			free(e);
			free(copy);
			return accelp_err_set(err, ACCEL_ERR_NOMEM, "store: out of memory");
		}
		e->next = kv->head;
		kv->head = e;
	}
	free(e->value);
	e->value = copy;
	e->len = len;
	return ACCEL_OK;
}

int accelp_kv_get(accel_kv *kv, const char *key, void *buf, uint64_t cap, uint64_t *ret_len,
                 accel_err *err)
{
	kv_entry *e = find(kv, key);
	if (!e)
		return accelp_err_set(err, ACCEL_ERR_TIMEOUT,
		                     "store: key '%s' was never set (single process: no other rank "
		                     "can set it)", key);
	if (buf && cap)
		memcpy(buf, e->value, e->len < cap ? e->len : cap);
	if (ret_len)
		*ret_len = e->len;
	return ACCEL_OK;
}

int accelp_kv_add(accel_kv *kv, const char *key, int64_t delta, int64_t *ret_value, accel_err *err)
{
	int64_t v = 0;
	kv_entry *e = find(kv, key);
	if (e && e->len == sizeof(v))
		memcpy(&v, e->value, sizeof(v));
	v += delta;
	int r = accelp_kv_set(kv, key, &v, sizeof(v), err);
	if (!r && ret_value)
		*ret_value = v;
	return r;
}
