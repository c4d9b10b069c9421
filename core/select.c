/* SPDX-License-Identifier: MIT */
/* core/select.c: the selection rules and the loader set-up. */
#include <dlfcn.h>
#include <string.h>

#include "accel-build-config.h"
#include "ctx-impl.h"
#include "select.h"

static int add(accel_select *sel, const char *name, const char *why, accel_err *err)
{
	if (accel_select_has(sel, name))
		return ACCEL_OK;
	if (sel->n == ACCEL_SELECT_MAX)
		return accel_err_set(err, ACCEL_ERR_CONFIG,
		                     "more than %d plugins selected (at '%s', from %s)",
		                     ACCEL_SELECT_MAX, name, why);
	sel->names[sel->n++] = name;
	return ACCEL_OK;
}

int accel_select_has(const accel_select *sel, const char *name)
{
	for (uint32_t i = 0; i < sel->n; i++)
		if (!strcmp(sel->names[i], name))
			return 1;
	return 0;
}

int accel_select_from_config(const accel_config *cfg, accel_select *ret_sel, accel_err *err)
{
	accel_select sel = {.n = 0};
	const char *s = NULL;
	int r;
	if (accel_config_peek_string(cfg, "strategy", &s) != ACCEL_OK || !s)
		s = "ddp";
	if ((r = add(&sel, s, "strategy", err)))
		return r;
	for (uint32_t i = 0; accel_config_peek_strlist(cfg, "plugins", i, &s) == ACCEL_OK; i++)
		if ((r = add(&sel, s, "plugins", err)))
			return r;
	if (accel_config_peek_string(cfg, "mixed_precision", &s) == ACCEL_OK && s) {
		/* Accelerate's mixed_precision implies the plugin doing the work. */
		if (!strcmp(s, "fp16") && (r = add(&sel, "scaler", "mixed_precision=fp16", err)))
			return r;
		if (!strcmp(s, "fp8") && (r = add(&sel, "fp8", "mixed_precision=fp8", err)))
			return r;
	}
	if (accel_config_peek_string(cfg, "backend", &sel.backend) != ACCEL_OK || !sel.backend)
		sel.backend = "auto";
	*ret_sel = sel;
	return ACCEL_OK;
}

typedef int (*cu_init_fn)(unsigned int);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_attr_fn)(int *, int, int);

void accel_select_probe_cuda(uint32_t *ret_req_bits, int32_t *ret_best_cc)
{
	*ret_req_bits = 0;
	*ret_best_cc = 0;
	if (!ACCEL_HAVE_CUDA)
		return;
	/* The driver is probed at run time so libaccel never links CUDA; it
	 * stays loaded (unloading CUDA's driver is not supported). */
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	cu_init_fn cu_init = (cu_init_fn)(uintptr_t)dlsym(h, "cuInit");
	cu_count_fn cu_count = (cu_count_fn)(uintptr_t)dlsym(h, "cuDeviceGetCount");
	cu_get_fn cu_get = (cu_get_fn)(uintptr_t)dlsym(h, "cuDeviceGet");
	cu_attr_fn cu_attr = (cu_attr_fn)(uintptr_t)dlsym(h, "cuDeviceGetAttribute");
	int n = 0;
	if (!cu_init || !cu_count || !cu_get || !cu_attr || cu_init(0) != 0 || cu_count(&n) != 0 ||
	    n <= 0)
		return;
	*ret_req_bits |= ACCEL_REQ_CUDA;
	for (int i = 0; i < n; i++) {
		int dev, major = 0, minor = 0;
		/* 75/76: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR */
		if (cu_get(&dev, i) == 0 && cu_attr(&major, 75, dev) == 0 &&
		    cu_attr(&minor, 76, dev) == 0 && major * 10 + minor > *ret_best_cc)
			*ret_best_cc = major * 10 + minor;
	}
}

int accel_select_open_loader(const accel_config *cfg, accel_loader **ret_loader, accel_err *err)
{
	accel_loader *ld = NULL;
	const char *dir;
	uint32_t avail;
	int32_t cc;
	int r = accel_loader_new(accel_host_table(), &ld, err);
	if (r)
		return r;
	for (uint32_t i = 0;
	     cfg && accel_config_peek_strlist(cfg, "plugin_dirs", i, &dir) == ACCEL_OK; i++)
		if ((r = accel_loader_add_dir(ld, dir, "plugin_dirs", err)))
			goto fail;
	if ((r = accel_loader_add_default_dirs(ld, err)))
		goto fail;
	accel_select_probe_cuda(&avail, &cc);
	accel_loader_set_available(ld, avail, cc);
	if ((r = accel_loader_scan(ld, err)))
		goto fail;
	*ret_loader = ld;
	return ACCEL_OK;
fail:
	accel_loader_free(ld);
	return r;
}

int accel_select_register_schemas(accel_config *cfg, const accel_loader *ld,
                                  const accel_select *sel, accel_err *err)
{
	/* Under "auto" any backend may be picked at run time; under "nccl" the
	 * host buffers still go to shm or mpi, picked as under auto. */
	int any_backend = !strcmp(sel->backend, "auto") || !strcmp(sel->backend, "nccl");
	for (uint32_t i = 0; i < accel_loader_count(ld); i++) {
		const accel_module *m = accel_loader_get(ld, i);
		int r = ACCEL_OK;
		if (m->status == ACCEL_MODULE_BROKEN || m->status == ACCEL_MODULE_SHADOWED)
			continue;
		if (m->kind == ACCEL_MODULE_PLUGIN && m->plugin->desc->config_section)
			r = accel_config_add_schema(cfg, m->plugin->desc->config_section, m->name,
			                            m->plugin->desc->params, m->plugin->desc->n_params,
			                            accel_select_has(sel, m->name), err);
		else if (m->kind == ACCEL_MODULE_COMM && m->comm->desc->config_section)
			r = accel_config_add_schema(cfg, m->comm->desc->config_section, m->name,
			                            m->comm->desc->params, m->comm->desc->n_params,
			                            any_backend || !strcmp(sel->backend, m->name), err);
		if (r)
			return r;
	}
	return ACCEL_OK;
}
