/* SPDX-License-Identifier: MIT */
/*
 * backends/common/coll-reqs.h: a list of requests in issue order: the live
 * requests (issued, not yet released by wait()) of mpi and tcp, appended at
 * issue, found and unlinked at wait(); shm's queue for its comm thread,
 * appended at issue and popped in order.
 * A linear search is fine: a training step has a handful in flight.
 *
 * Include it after the backend's definition of struct accel_comm_req, which
 * must have a member `accel_comm_req *next` (the list's link); each backend
 * compiles its own copy.  The caller holds whatever lock guards the list.
 */
#ifndef ACCEL_BACKENDS_COLL_REQS_H
#define ACCEL_BACKENDS_COLL_REQS_H

#include "accel/comm.h"

typedef struct coll_reqs {
	accel_comm_req *head, *tail;
} coll_reqs;

static inline void coll_reqs_append(coll_reqs *l, accel_comm_req *r)
{
	r->next = NULL;
	if (l->tail)
		l->tail->next = r;
	else
		l->head = r;
	l->tail = r;
}

/* Take the oldest off the list (the list is not empty). */
static inline accel_comm_req *coll_reqs_pop(coll_reqs *l)
{
	accel_comm_req *r = l->head;
	l->head = r->next;
	if (!l->head)
		l->tail = NULL;
	return r;
}

/* Whether r is on the list (wait() and test() refuse any other pointer). */
static inline int coll_reqs_has(const coll_reqs *l, const accel_comm_req *r)
{
	for (const accel_comm_req *p = l->head; p; p = p->next)
		if (p == r)
			return 1;
	return 0;
}

/* Take r off the list; r->next keeps its value (a comm thread's cursor
 * may still step over it). */
static inline void coll_reqs_unlink(coll_reqs *l, accel_comm_req *r)
{
	accel_comm_req *prev = NULL;
	for (accel_comm_req *p = l->head; p; prev = p, p = p->next) {
		if (p != r)
			continue;
		if (prev)
			prev->next = r->next;
		else
			l->head = r->next;
		if (l->tail == r)
			l->tail = prev;
		return;
	}
}

#endif /* ACCEL_BACKENDS_COLL_REQS_H */
