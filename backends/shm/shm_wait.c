/* SPDX-License-Identifier: MIT */
/* backends/shm/shm_wait.c: waiting for peers without burning the machine or
 * hanging.
 *
 * A waiter first busy-polls the counters it needs (latency: a peer on
 * another core answers in well under a microsecond), then sleeps on its own
 * futex word in the segment.  A rank that advances a counter looks at the
 * sleeper count and, if anyone sleeps, bumps their words and wakes them.
 * The sleeper count and the counters are accessed sequentially consistent
 * (a Dekker pair), so a waiter either sees the new value before it sleeps
 * or the poster sees the waiter and wakes it.  Sleeps are sliced (50 ms) so
 * that the waiter also notices timeouts, aborts and dead peers. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm-impl.h"

#define SLEEP_SLICE_NS 50000000ull      /* futex sleep slice */
#define LIVENESS_EVERY_NS 100000000ull  /* check peers' processes this often */

int shm_fmt(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return n;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static long futex_call(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	/* Not FUTEX_PRIVATE: the word lives in memory shared between processes. */
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void shm_wake_rank(shm_comm *c, int32_t q)
{
	atomic_fetch_add_explicit(&c->wake[q].word, 1, memory_order_seq_cst);
	futex_call(&c->wake[q].word, FUTEX_WAKE, INT_MAX, NULL);
}

static void wake_sleepers(shm_comm *c)
{
	if (atomic_load_explicit(&c->hdr->nsleepers, memory_order_seq_cst) == 0)
		return;
	for (int32_t q = 0; q < c->world; q++)
		if (q != c->rank && atomic_load_explicit(&c->ranks[q].sleeping, memory_order_seq_cst))
			shm_wake_rank(c, q);
}

/* Record the CPU this rank runs on; returns it. */
static int note_cpu(shm_comm *c)
{
	int cpu = sched_getcpu();
	_Atomic int32_t *slot = &c->ranks[c->rank].cpu;
	if (atomic_load_explicit(slot, memory_order_relaxed) != cpu)
		atomic_store_explicit(slot, cpu, memory_order_relaxed);
	return cpu;
}

/* Posting also records where this rank runs, so that a waiter can tell
 * whether the rank it waits for shares its CPU (see shm_wait()). */
void shm_post_seq(shm_comm *c, uint64_t seq)
{
	note_cpu(c);
	atomic_store_explicit(&c->ranks[c->rank].seq, seq, memory_order_seq_cst);
	wake_sleepers(c);
}

void shm_post_sig(shm_comm *c, uint64_t sig)
{
	note_cpu(c);
	atomic_store_explicit(&c->ranks[c->rank].sig, sig, memory_order_seq_cst);
	wake_sleepers(c);
}

static inline uint64_t counter(const shm_comm *c, int use_sig, int32_t q)
{
	return use_sig ? atomic_load_explicit(&c->ranks[q].sig, memory_order_seq_cst)
	               : atomic_load_explicit(&c->ranks[q].seq, memory_order_seq_cst);
}

static int satisfied(const shm_comm *c, int use_sig, uint64_t target, int32_t which)
{
	if (which >= 0)
		return counter(c, use_sig, which) >= target;
	for (int32_t q = 0; q < c->world; q++)
		if (counter(c, use_sig, q) < target)
			return 0;
	return 1;
}

/* The waiter shares its CPU with a rank it waits for although there are CPUs
 * enough for every rank: move this thread to a CPU no rank was seen on, then
 * give back the affinity it had (the kernel leaves a thread where it is as
 * long as that CPU is allowed).  Wake-ups pull the woken rank onto the
 * waker's CPU, and two ranks polling on one CPU make every op wait for a
 * context switch.  At most once per millisecond per rank. */
static void move_away(shm_comm *c, int here)
{
	uint64_t now = shm_now_ns();
	if (c->oversubscribed || now - c->last_move_ns < 1000000ull)
		return;
	c->last_move_ns = now;
	cpu_set_t mine, target;
	if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2)
		return;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (cpu == here || !CPU_ISSET(cpu, &mine))
			continue;
		int used = 0;
		for (int32_t q = 0; q < c->world && !used; q++)
			used = q != c->rank && atomic_load_explicit(&c->ranks[q].cpu, memory_order_relaxed) == cpu;
		if (used)
			continue;
		CPU_ZERO(&target);
		CPU_SET(cpu, &target);
		if (sched_setaffinity(0, sizeof(target), &target) == 0) {
			sched_setaffinity(0, sizeof(mine), &mine);
			c->n_moves++;
			note_cpu(c);
		}
		return;
	}
}

/* The sum of the phase counters of the ranks still below target: it moves
 * whenever one of them moves. */
static uint64_t progress(const shm_comm *c, uint64_t target, int32_t which)
{
	uint64_t sum = 0;
	for (int32_t q = 0; q < c->world; q++) {
		if (q == c->rank || (which >= 0 && q != which))
			continue;
		uint64_t v = counter(c, 1, q);
		if (v < target)
			sum += v;
	}
	return sum;
}

int shm_cpus_busy(shm_comm *c)
{
	/* "0.52 0.58 0.59 3/456 12345": the fourth field is runnable / all
	 * threads, counted now (the averages lag by seconds).  pread at 0
	 * regenerates the file, one system call, but it took 9-15 us on the
	 * busy 2-vCPU VM: hence at most one read per SHM_BUSY_READ_NS. */
	char buf[128];
	if (c->loadavg_fd < 0)
		return 0;
	uint64_t now = shm_now_ns();
	if (c->busy_read_ns && now - c->busy_read_ns < SHM_BUSY_READ_NS)
		return c->busy;
	c->busy_read_ns = now;
	c->busy = 0;
	ssize_t n = pread(c->loadavg_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = buf;
	for (int field = 0; field < 3 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (!p)
		return 0;
	long running = strtol(p, NULL, 10);
	c->busy = running > c->ncpus;
	return c->busy;
}

/* Does a rank we still wait for sit on CPU `cpu`? */
static int colocated(const shm_comm *c, int use_sig, uint64_t target, int32_t which, int cpu)
{
	if (cpu < 0)
		return 0;
	for (int32_t q = 0; q < c->world; q++) {
		if (q == c->rank || (which >= 0 && q != which) || counter(c, use_sig, q) >= target)
			continue;
		if (atomic_load_explicit(&c->ranks[q].cpu, memory_order_relaxed) == cpu)
			return 1;
	}
	return 0;
}

void shm_op_describe(const shm_comm *c, const shm_op *op, char *buf, size_t cap)
{
	const char *red[] = {"sum", "avg", "max", "min"};
	const char *rn = op->redop < 4 ? red[op->redop] : "?";
	const char *dn = accel_abi_dtype_name(op->dtype);
	unsigned long long n = (unsigned long long)op->count;
	unsigned long long seq = (unsigned long long)op->seq;

	switch (op->kind & SHM_OP_KIND_MASK) {
	case SHM_OP_ALLREDUCE:
		shm_fmt(buf, cap, "allreduce #%llu (%s, %llu elements, %s)", seq, dn, n, rn);
		break;
	case SHM_OP_REDUCE_SCATTER:
		shm_fmt(buf, cap, "reduce_scatter #%llu (%s, %d x %llu elements, %s)", seq, dn,
		         (int)c->world, n, rn);
		break;
	case SHM_OP_ALLGATHER:
		shm_fmt(buf, cap, "allgather #%llu (%s, %d x %llu elements)", seq, dn, (int)c->world,
		         n);
		break;
	case SHM_OP_BROADCAST:
		shm_fmt(buf, cap, "broadcast #%llu (%s, %llu elements, root %d)", seq, dn, n,
		         (int)op->root);
		break;
	case SHM_OP_BARRIER:
		shm_fmt(buf, cap, "barrier #%llu", seq);
		break;
	default:
		shm_fmt(buf, cap, "collective #%llu", seq);
		break;
	}
	if (c->gname[0]) {
		/* "-g1c1" -> " on group 1c1": the sequence number is the group's */
		size_t len = strlen(buf);
		if (len + 1 < cap)
			shm_fmt(buf + len, cap - len, " on group %s", c->gname + 2);
	}
}

static int proc_is_zombie(int32_t pid)
{
	char path[64], buf[256];
	shm_fmt(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "pid (comm) S ...": the state follows the last ')' */
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int shm_peer_dead(shm_comm *c, int32_t q, char *why, size_t cap)
{
	int32_t pid = c->pids ? c->pids[q] : 0;
	int dead = 0;

	if (atomic_load_explicit(&c->ranks[q].state, memory_order_acquire) == SHM_RANK_LEFT) {
		shm_fmt(why, cap, "rank %d (pid %d) left the job (freed its communicator)", shm_wr(c, q),
		         (int)pid);
		return 1;
	}
	if (c->pidfds && c->pidfds[q] >= 0) {
		struct pollfd pfd = {.fd = c->pidfds[q], .events = POLLIN};
		dead = poll(&pfd, 1, 0) > 0;
	} else if (c->pid_visible && c->pid_visible[q] && pid > 0) {
		dead = (kill(pid, 0) == -1 && errno == ESRCH) || proc_is_zombie(pid);
	}
	if (dead)
		shm_fmt(why, cap, "rank %d (pid %d) is dead (exited or was killed)", shm_wr(c, q),
		        (int)pid);
	return dead;
}

/* "rank 2" / "ranks 2, 3" of the ranks whose counter is below target. */
static int list_missing(const shm_comm *c, int use_sig, uint64_t target, int32_t which,
                        char *buf, size_t cap)
{
	int n = 0;
	size_t len = 0;
	buf[0] = '\0';
	for (int32_t q = 0; q < c->world; q++) {
		if ((which >= 0 && q != which) || counter(c, use_sig, q) >= target)
			continue;
		n++;
		if (n <= 16 && len < cap) {
			int w = shm_fmt(buf + len, cap - len, "%s%d", n > 1 ? ", " : "", shm_wr(c, q));
			len += w > 0 ? (size_t)w : 0;
		}
	}
	if (n > 16 && len < cap)
		shm_fmt(buf + len, cap - len, ", ... (%d ranks)", n);
	return n;
}

static void fmt_seconds(int64_t ms, char *buf, size_t cap)
{
	if (ms % 1000 == 0)
		shm_fmt(buf, cap, "%lld s", (long long)(ms / 1000));
	else
		shm_fmt(buf, cap, "%.3g s", (double)ms / 1000.0);
}

int shm_check_abort(shm_comm *c, const shm_op *op, char *msg, size_t cap)
{
	int code = atomic_load_explicit(&c->hdr->abort_code, memory_order_acquire);
	if (code == 0)
		return ACCEL_OK;
	char what[160];
	shm_op_describe(c, op, what, sizeof(what));
	if (c->hdr->abort_rank == c->rank)
		shm_fmt(msg, cap, "%s: the communicator failed earlier: %s", what, c->hdr->abort_msg);
	else
		shm_fmt(msg, cap, "%s: aborted because rank %d failed: %s", what,
		         shm_wr(c, c->hdr->abort_rank), c->hdr->abort_msg);
	return code;
}

void shm_abort(shm_comm *c, int code, const char *msg)
{
	int32_t expect = 0;
	if (atomic_compare_exchange_strong(&c->hdr->abort_claim, &expect, 1)) {
		c->hdr->abort_rank = c->rank;
		shm_fmt(c->hdr->abort_msg, sizeof(c->hdr->abort_msg), "%s", msg);
		atomic_store_explicit(&c->hdr->abort_code, code, memory_order_release);
	}
	for (int32_t q = 0; q < c->world; q++)
		if (q != c->rank)
			shm_wake_rank(c, q);
}

static int fail_wait(shm_comm *c, const shm_op *op, int use_sig, uint64_t target, int32_t which,
                     int code, const char *dead_why, uint64_t waited_ns, char *msg, size_t cap)
{
	char what[160], ranks[160], secs[32];
	shm_op_describe(c, op, what, sizeof(what));
	int n = list_missing(c, use_sig, target, which, ranks, sizeof(ranks));
	const char *verb = use_sig ? "stopped partway through it" : "never arrived";
	if (n == 0)   /* raced to completion while we formatted: report plainly */
		shm_fmt(ranks, sizeof(ranks), "?");
	if (code == ACCEL_ERR_TIMEOUT) {
		fmt_seconds(c->timeout_ms, secs, sizeof(secs));
		shm_fmt(msg, cap,
		         "%s: %s %s %s within %s (%s alive: stuck, or issuing collectives in a "
		         "different order?)",
		         what, n == 1 ? "rank" : "ranks", ranks, verb, secs,
		         n == 1 ? "the process is" : "the processes are");
	} else {
		shm_fmt(msg, cap, "%s: %s %s %s: %s after %.3g s", what, n == 1 ? "rank" : "ranks",
		         ranks, verb, dead_why, (double)waited_ns / 1e9);
	}
	return code;
}

int shm_wait(shm_comm *c, const shm_op *op, int use_sig, uint64_t target, int32_t which,
             uint64_t deadline_ns, int64_t spin_ns, char *msg, size_t cap)
{
	if (satisfied(c, use_sig, target, which))
		return ACCEL_OK;

	/* Poll, then sleep.  While polling, look where the ranks we wait for
	 * last ran: one on our own CPU cannot make progress while we poll (a
	 * futex wake-up tends to move the woken rank onto the waker's CPU), so
	 * then hand the CPU over with sched_yield() instead.  With more ranks
	 * than CPUs, polling always yields after its first microseconds. */
	uint64_t start = shm_now_ns();
	uint64_t spin_end = start + (uint64_t)(spin_ns > 0 ? spin_ns : 0);
	uint64_t poll_end = spin_end + (uint64_t)(c->yield_ns > 0 ? c->yield_ns : 0);
	int yielding = 0;
	/* Inside an op (use_sig) every rank waited for is in the same op, and
	 * one that runs posts a phase every pipeline round (tens of
	 * microseconds).  One whose counter stood still for c->stall_ns is
	 * not running: another process has its CPU.  Polling on would keep our
	 * CPU from it (or from whoever holds the CPU it waits for) for the
	 * rest of spin_us, so sleep at once and let the post wake us.
	 * c->stall_ns is two rounds' bytes at 1 GB/s, at least 100 us (262
	 * us with the defaults), so a peer that runs, even slowly, is polled
	 * for.  (The zero-copy ops post once, at their end: a waiter there
	 * sleeps after c->stall_ns and costs one wake-up per op.)
	 * shm_coll_run() stops polling altogether for large ops while the
	 * CPUs are busy. */
	uint64_t last_progress = use_sig ? progress(c, target, which) : 0, last_change = start;
	note_cpu(c);
	for (unsigned i = 1;; i++) {
		if (yielding)
			sched_yield();
		else
			cpu_relax();
		if (satisfied(c, use_sig, target, which))
			return ACCEL_OK;
		if (yielding || (i & 127) == 0) {
			if (atomic_load_explicit(&c->hdr->abort_code, memory_order_relaxed) ||
			    atomic_load_explicit(&c->closing, memory_order_relaxed))
				break;
			uint64_t now = shm_now_ns();
			if (now >= poll_end)
				break;
			if (use_sig) {
				uint64_t p = progress(c, target, which);
				if (p != last_progress) {
					last_progress = p;
					last_change = now;
				} else if (now - last_change >= c->stall_ns) {
					break;
				}
			}
			int here = note_cpu(c);
			int shared = colocated(c, use_sig, target, which, here);
			if (shared)
				move_away(c, here);
			yielding = now >= spin_end || (shared && colocated(c, use_sig, target, which, note_cpu(c)));
		}
	}

	shm_rank *me = &c->ranks[c->rank];
	_Atomic uint32_t *word = &c->wake[c->rank].word;
	uint64_t last_live = 0;
	for (;;) {
		int st = shm_check_abort(c, op, msg, cap);
		if (st)
			return st;
		if (atomic_load_explicit(&c->closing, memory_order_acquire)) {
			char what[160];
			shm_op_describe(c, op, what, sizeof(what));
			shm_fmt(msg, cap, "%s: abandoned: the communicator was closed while it ran", what);
			return ACCEL_ERR_COMM;
		}
		uint64_t now = shm_now_ns();
		if (now - last_live >= LIVENESS_EVERY_NS) {
			last_live = now;
			for (int32_t q = 0; q < c->world; q++) {
				char why[160];
				if (q == c->rank || (which >= 0 && q != which) ||
				    counter(c, use_sig, q) >= target)
					continue;
				if (shm_peer_dead(c, q, why, sizeof(why))) {
					if (satisfied(c, use_sig, target, which))
						return ACCEL_OK;
					/* name the dead rank, not every rank still behind */
					return fail_wait(c, op, use_sig, target, q, ACCEL_ERR_PEER, why,
					                 now - start, msg, cap);
				}
			}
		}
		if (now >= deadline_ns) {
			if (satisfied(c, use_sig, target, which))
				return ACCEL_OK;
			return fail_wait(c, op, use_sig, target, which, ACCEL_ERR_TIMEOUT, NULL,
			                 now - start, msg, cap);
		}

		uint32_t v = atomic_load_explicit(word, memory_order_seq_cst);
		atomic_store_explicit(&me->sleeping, 1, memory_order_seq_cst);
		atomic_fetch_add_explicit(&c->hdr->nsleepers, 1, memory_order_seq_cst);
		if (!satisfied(c, use_sig, target, which)) {
			uint64_t slice = deadline_ns - now;
			if (slice > SLEEP_SLICE_NS)
				slice = SLEEP_SLICE_NS;
			struct timespec ts = {.tv_sec = (time_t)(slice / 1000000000ull),
			                      .tv_nsec = (long)(slice % 1000000000ull)};
			futex_call(word, FUTEX_WAIT, v, &ts);
			note_cpu(c);   /* a wake-up may have moved us */
		}
		atomic_fetch_sub_explicit(&c->hdr->nsleepers, 1, memory_order_seq_cst);
		atomic_store_explicit(&me->sleeping, 0, memory_order_seq_cst);
		if (satisfied(c, use_sig, target, which))
			return ACCEL_OK;
	}
}
