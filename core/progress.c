/* SPDX-License-Identifier: MIT */
/* core/progress.c: accel_progress_*: a training run's progress on the main
 * process.
 *
 * On a terminal a bar redrawn in place (carriage return and erase-line,
 * at most ten times a second); otherwise, a log file or the launcher's
 * pipe, a plain line at each update that brings a loss, since "\r" in a log
 * is noise.  accel_print() erases the bar before it writes, so messages
 * between updates land on lines of their own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "accel/accel.h"
#include "ctx-impl.h"
#include "error.h"
#include "train-impl.h"

#define MODE_BAR   1
#define MODE_LINES 2

struct accelp_progress {
	int mode;
	uint64_t first, total;      /* steps done at begin; steps of the run     */
	double t0;                  /* begin                                     */
	uint64_t step, samples;     /* the last update                           */
	double loss;                /* the last loss given; NaN: none yet        */
	double last_draw;           /* bar: when it was last drawn               */
	int drawn;                  /* bar: on the terminal's current line       */
	double t_line;              /* lines: time and samples of the last line  */
	uint64_t samples_line;
};

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(double s, char *buf, size_t cap)
{
	if (!isfinite(s) || s < 0) {
		snprintf(buf, cap, "?");
		return;
	}
	unsigned long t = (unsigned long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, cap, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, cap, "%02lu:%02lu", t / 60, t % 60);
}

static int columns(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	const char *c = getenv("COLUMNS");
	int n = c ? atoi(c) : 0;
	return n > 20 ? n : 80;
}

/* Seconds to the end at the run's average pace so far. */
static double eta(const struct accelp_progress *p, double elapsed)
{
	if (p->step <= p->first || p->total <= p->step)
		return p->total <= p->step ? 0 : NAN;
	return elapsed / (double)(p->step - p->first) * (double)(p->total - p->step);
}

static void draw_bar(struct accelp_progress *p, double now)
{
	char right[192], el[32], left[32], loss[32] = "", bar[512];
	double elapsed = now - p->t0;
	double frac = p->total ? (double)p->step / (double)p->total : 0;
	if (frac > 1)
		frac = 1;
	fmt_time(elapsed, el, sizeof(el));
	fmt_time(eta(p, elapsed), left, sizeof(left));
	if (!isnan(p->loss))
		snprintf(loss, sizeof(loss), ", loss %.4f", p->loss);
	snprintf(right, sizeof(right), " %llu/%llu [%s<%s, %.0f samples/s%s]",
	         (unsigned long long)p->step, (unsigned long long)p->total, el, left,
	         elapsed > 0 ? (double)p->samples / elapsed : 0.0, loss);
	int width = columns() - (int)strlen(right) - 7;  /* "100%|" "|" and a spare column */
	if (width > (int)sizeof(bar) - 1)
		width = (int)sizeof(bar) - 1;
	if (width < 10)
		width = 10;
	int fill = (int)(frac * width);
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, ' ', (size_t)(width - fill));
	bar[width] = '\0';
	printf("\r%3d%%|%s|%s\033[K", (int)(frac * 100), bar, right);
	fflush(stdout);
	p->drawn = 1;
	p->last_draw = now;
}

static void print_line(const accel_ctx *ctx, struct accelp_progress *p, double now)
{
	char left[32];
	double dt = now - p->t_line;
	double sps = dt > 0 ? (double)(p->samples - p->samples_line) / dt : 0;
	fmt_time(eta(p, now - p->t0), left, sizeof(left));
	printf("step %5llu/%llu", (unsigned long long)p->step, (unsigned long long)p->total);
	if (!isnan(p->loss))
		printf("  loss %.4f", p->loss);
	printf("  lr %.4g  %.0f samples/s  eta %s\n", accel_get_lr(ctx), sps, left);
	fflush(stdout);
	p->t_line = now;
	p->samples_line = p->samples;
}

int accel_progress_begin(accel_ctx *ctx, uint64_t first_step, uint64_t total_steps)
{
	struct accelp_progress *p;
	const char *term;
	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (first_step > total_steps)
		return accelp_err_set(&ctx->err, ACCEL_ERR_INVALID_ARG, "accel_progress_begin: "
		                      "first_step %llu is past total_steps %llu",
		                      (unsigned long long)first_step, (unsigned long long)total_steps);
	if (ctx->world.rank != 0)
		return ACCEL_OK;
	accelp_progress_free(ctx->train);
	p = calloc(1, sizeof(*p));
	if (!p)
		return accelp_err_set(&ctx->err, ACCEL_ERR_NOMEM, "out of memory");
	term = getenv("TERM");
	p->mode = isatty(STDOUT_FILENO) && !(term && !strcmp(term, "dumb")) ? MODE_BAR : MODE_LINES;
	p->first = p->step = first_step;
	p->total = total_steps;
	p->t0 = p->t_line = mono();
	p->loss = NAN;
	ctx->train->progress = p;
	return ACCEL_OK;
}

int accel_progress_update(accel_ctx *ctx, uint64_t step, uint64_t samples, double loss)
{
	struct accelp_progress *p;
	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (ctx->world.rank != 0)
		return ACCEL_OK;
	if (!(p = ctx->train->progress))
		return accelp_err_set(&ctx->err, ACCEL_ERR_STATE, "accel_progress_update: no "
		                      "accel_progress_begin() before it");
	double now = mono();
	int has_loss = !isnan(loss);
	p->step = step;
	p->samples = samples;
	if (has_loss)
		p->loss = loss;
	if (p->mode == MODE_BAR) {
		if (!p->drawn || has_loss || step >= p->total || now - p->last_draw >= 0.1)
			draw_bar(p, now);
	} else if (has_loss || step >= p->total) {
		if (!has_loss)
			p->loss = NAN;   /* the last step without a loss: none shown */
		print_line(ctx, p, now);
	}
	return ACCEL_OK;
}

int accel_progress_end(accel_ctx *ctx)
{
	if (!ctx || !ctx->train)
		return ACCEL_ERR_INVALID_ARG;
	if (ctx->world.rank != 0 || !ctx->train->progress)
		return ACCEL_OK;
	struct accelp_progress *p = ctx->train->progress;
	if (p->mode == MODE_BAR)
		draw_bar(p, mono());
	accelp_progress_free(ctx->train);
	return ACCEL_OK;
}

void accelp_progress_clear(accel_train *t)
{
	struct accelp_progress *p = t ? t->progress : NULL;
	if (!p || !p->drawn)
		return;
	fputs("\r\033[K", stdout);
	p->drawn = 0;
}

void accelp_progress_free(accel_train *t)
{
	struct accelp_progress *p = t->progress;
	if (!p)
		return;
	if (p->drawn) {   /* leave the bar as the last line, the cursor below it */
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(p);
	t->progress = NULL;
}
