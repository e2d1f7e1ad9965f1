/* SPDX-License-Identifier: MIT */
/*
 * JIT linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete,
 * cuLinkDestroy) on the host driver's linker. The link state lives here:
 * the options and a copy of each input. cuLinkComplete uploads each input
 * as a module image is uploaded (MODULE_UPLOAD, bounded by the VM's staging
 * budget), sends one LINK naming them with their types, names and the
 * integer options, and reads the result back (LINK_READ, in chunks): the
 * cubin, kept here until cuLinkDestroy as CUDA keeps it, and the two logs,
 * written into the caller's buffers with the wall time.
 *
 * Options. The logs (CU_JIT_INFO/ERROR_LOG_BUFFER and _SIZE_BYTES) and
 * CU_JIT_WALL_TIME are served here, written back at completion into the
 * buffers and option values the caller gave (which CUDA too asks to stay
 * valid for the state's life). CU_JIT_OPTIMIZATION_LEVEL, _TARGET,
 * _GENERATE_DEBUG_INFO, _LOG_VERBOSE and _GENERATE_LINE_INFO go to the host
 * linker as integers. Every other option CUDA defines is ignored as a hint
 * (register and thread counts, cache mode, fast-math flags, ...: none of
 * them changes what a correct program computes); a value that is no
 * CUjit_option is CUDA_ERROR_INVALID_VALUE. Options given to one input
 * (cuLinkAddData's own) are hints alike.
 *
 * cuModuleLoadDataEx and cuLibraryLoadData take the same options: PTX given
 * with options is linked here alone (cu_link_one), by the same option
 * handling and the same requests, and the cubin loaded; a cubin or fat
 * binary needs no JIT, so its options are hints and its logs come back
 * empty (cu_jit_no_compile).
 *
 * Bounds: QCUDA_MAX_LINK_INPUTS inputs and QCUDA_MAX_MODULE bytes of them in
 * all (more: CUDA_ERROR_NOT_SUPPORTED, which no native link answers for
 * this, so the cause is plain).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"

#define LINK_MAGIC 0x6b6e696cu /* "link" */
/* The logs the backend sends back at most (it keeps 64 KiB of each). */
#define LOG_MAX (1u << 20)

struct link_input {
	uint32_t type;
	char name[QCUDA_LINK_NAME];
	void *data;
	size_t size;
};

/* The JIT options of a link, as the caller gave them. */
struct jit_opts {
	char *info, *error; /* the caller's log buffers, and their sizes */
	size_t info_size, error_size;
	void **info_slot, **error_slot, **wall_slot; /* option values written back */
	uint32_t nopts; /* those the host linker takes */
	uint32_t opt[QCUDA_MAX_LINK_OPTIONS], val[QCUDA_MAX_LINK_OPTIONS];
};

struct CUlinkState_st {
	uint32_t magic;
	struct jit_opts jit;
	uint32_t ninputs;
	struct link_input in[QCUDA_MAX_LINK_INPUTS];
	size_t total;
	void *cubin; /* the result, until cuLinkDestroy */
};

static int link_valid(CUlinkState s)
{
	return s && s->magic == LINK_MAGIC;
}

/* One JIT option, into j. */
static CUresult jit_option(struct jit_opts *j, CUjit_option o, void **slot)
{
	switch (o) {
	case CU_JIT_INFO_LOG_BUFFER:
		j->info = *slot;
		break;
	case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
		j->info_size = (size_t)(uintptr_t)*slot;
		j->info_slot = slot;
		break;
	case CU_JIT_ERROR_LOG_BUFFER:
		j->error = *slot;
		break;
	case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
		j->error_size = (size_t)(uintptr_t)*slot;
		j->error_slot = slot;
		break;
	case CU_JIT_WALL_TIME:
		j->wall_slot = slot;
		break;
	case CU_JIT_OPTIMIZATION_LEVEL:
	case CU_JIT_TARGET:
	case CU_JIT_GENERATE_DEBUG_INFO:
	case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO:
		if (j->nopts == QCUDA_MAX_LINK_OPTIONS)
			return CUDA_ERROR_INVALID_VALUE; /* each named more than once */
		j->opt[j->nopts] = (uint32_t)o;
		j->val[j->nopts++] = (uint32_t)(uintptr_t)*slot;
		break;
	default:
		if ((unsigned)o >= CU_JIT_NUM_OPTIONS)
			return CUDA_ERROR_INVALID_VALUE;
		break; /* a hint (see the top) */
	}
	return CUDA_SUCCESS;
}

static CUresult jit_options(struct jit_opts *j, unsigned int n, CUjit_option *options, void **values)
{
	CUresult r = CUDA_SUCCESS;

	if (n && (!options || !values))
		return CUDA_ERROR_INVALID_VALUE;
	memset(j, 0, sizeof(*j));
	for (unsigned int i = 0; i < n && r == CUDA_SUCCESS; i++)
		r = jit_option(j, options[i], &values[i]);
	return r;
}

CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)
{
	CUlinkState s;
	CUresult r;

	if (!stateOut)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r != CUDA_SUCCESS)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = LINK_MAGIC;
	r = jit_options(&s->jit, numOptions, options, optionValues);
	if (r != CUDA_SUCCESS) {
		free(s);
		return r;
	}
	*stateOut = s;
	return CUDA_SUCCESS;
}

/* Keeps data (owned: freed with the state, or here on failure) as the next input. */
static CUresult link_add(CUlinkState s, CUjitInputType type, void *data, size_t size, const char *name)
{
	struct link_input *in;

	if (!link_valid(s) || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES || size == 0) {
		free(data);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (s->ninputs == QCUDA_MAX_LINK_INPUTS || size > QCUDA_MAX_MODULE - s->total) {
		qc_debug("link: more than %u inputs or %u bytes", (unsigned)QCUDA_MAX_LINK_INPUTS,
			 (unsigned)QCUDA_MAX_MODULE);
		free(data);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	in = &s->in[s->ninputs++];
	in->type = (uint32_t)type;
	in->data = data;
	in->size = size;
	snprintf(in->name, sizeof(in->name), "%s", name ? name : "");
	s->total += size;
	return CUDA_SUCCESS;
}

CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
		       unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	void *copy;

	(void)numOptions, (void)options, (void)optionValues; /* hints (see the top) */
	if (!data || size == 0 || size > QCUDA_MAX_MODULE)
		return !data || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
	copy = malloc(size);
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(copy, data, size);
	return link_add(state, type, copy, size, name);
}

CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
		       CUjit_option *options, void **optionValues)
{
	void *buf;
	size_t size;
	CUresult r;

	(void)numOptions, (void)options, (void)optionValues;
	if (!link_valid(state))
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_read_file(path, &buf, &size);
	if (r != CUDA_SUCCESS)
		return r;
	return link_add(state, type, buf, size, path);
}

/* Uploads the inputs and sends LINK naming every upload begun: LINK takes
 * each upload it names whatever follows, so none is left staged. After a
 * failed upload (which LINK refuses: incomplete or unknown) the first type
 * is one no input has besides, so that nothing is linked in any case. */
static cudaError_t link_send(const struct jit_opts *j, const struct link_input *inputs, uint32_t ninputs,
			     struct qcuda_out_link *out, uint64_t *result)
{
	struct qcuda_args_link a = { 0 };
	cudaError_t e, up = cudaSuccess;

	for (uint32_t i = 0; i < ninputs && up == cudaSuccess; i++) {
		const struct link_input *in = &inputs[i];

		a.upload_id[i] = qc_upload_id();
		a.type[i] = in->type;
		memcpy(a.name + (size_t)i * QCUDA_LINK_NAME, in->name, QCUDA_LINK_NAME);
		a.num_inputs = i + 1;
		up = qc_req_module_upload(a.upload_id[i], in->size, in->data, in->size);
	}
	if (up != cudaSuccess)
		a.type[0] = CU_JIT_NUM_INPUT_TYPES;
	a.num_options = j->nopts;
	memcpy(a.option, j->opt, sizeof(j->opt));
	memcpy(a.value, j->val, sizeof(j->val));
	e = qc_req_link(&a, out, result);
	return up != cudaSuccess ? up : e;
}

/* Reads `size` bytes of LINK result `id` into buf, a chunk per request. */
static cudaError_t link_read(uint64_t id, unsigned char *buf, uint64_t size)
{
	for (uint64_t at = 0; at < size;) {
		uint64_t n = size - at < QCUDA_CHUNK ? size - at : QCUDA_CHUNK, got = 0;
		cudaError_t e = qc_req_link_read(id, at, buf + at, n, &got);

		if (e != cudaSuccess)
			return e;
		if (got == 0 || got > n)
			return cudaErrorUnknown;
		at += got;
	}
	return cudaSuccess;
}

/* A log into the caller's buffer (NUL-terminated, cut to fit) and its size option. */
static void log_put(char *dst, size_t size, void **slot, const unsigned char *src, size_t n)
{
	if (!dst || size == 0)
		return;
	if (n > size - 1)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = 0;
	n = strlen(dst); /* the host's bytes may end in their own NUL */
	/* As the driver answers (measured on an H100): the text and its NUL, 0 for no text. */
	if (slot)
		*slot = (void *)(uintptr_t)(n ? n + 1 : 0);
}

/* The logs answered where nothing was compiled: empty, nothing written. */
static void log_none(char *dst, size_t size, void **slot)
{
	if (dst && size)
		dst[0] = 0;
	if (slot)
		*slot = 0;
}

/* Links the inputs with options j on the host: the logs and wall time
 * written back, and the image, malloc'd with a NUL after it (a PTX-like one
 * is read as a C string), in *image, or the link's own status. */
static CUresult link_run(const struct jit_opts *j, const struct link_input *inputs, uint32_t ninputs,
			 unsigned char **image, size_t *size)
{
	struct qcuda_out_link out = { 0 };
	uint64_t id = 0, total;
	unsigned char *buf;
	cudaError_t e;

	e = link_send(j, inputs, ninputs, &out, &id);
	if (e != cudaSuccess)
		return cu_result(e);
	if (out.image_bytes > QCUDA_MAX_MODULE || out.info_bytes > LOG_MAX || out.error_bytes > LOG_MAX)
		return CUDA_ERROR_UNKNOWN;
	total = out.image_bytes + out.info_bytes + out.error_bytes;
	buf = malloc(total + 1);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e = total ? link_read(id, buf, total) : cudaSuccess;
	if (e != cudaSuccess) {
		free(buf);
		return cu_result(e);
	}
	log_put(j->info, j->info_size, j->info_slot, buf + out.image_bytes, out.info_bytes);
	log_put(j->error, j->error_size, j->error_slot, buf + out.image_bytes + out.info_bytes, out.error_bytes);
	if (j->wall_slot)
		memcpy(j->wall_slot, &out.wall_ms_bits,
		       sizeof(float)); /* the float in the option's value, as CUDA writes it */
	if (out.link_status != 0) {
		free(buf);
		return (CUresult)out.link_status;
	}
	buf[out.image_bytes] = 0;
	*image = buf;
	*size = (size_t)out.image_bytes;
	return CUDA_SUCCESS;
}

CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	unsigned char *image = NULL;
	size_t size = 0;
	CUresult r;

	if (!link_valid(state) || !cubinOut || !sizeOut || state->ninputs == 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = link_run(&state->jit, state->in, state->ninputs, &image, &size);
	if (r != CUDA_SUCCESS)
		return r;
	free(state->cubin);
	state->cubin = image;
	*cubinOut = image;
	*sizeOut = size;
	return CUDA_SUCCESS;
}

CUresult cu_link_one(const void *ptx, size_t size, unsigned int n, CUjit_option *options, void **values, void **cubin)
{
	struct link_input in = { .type = CU_JIT_INPUT_PTX, .data = (void *)ptx, .size = size };
	struct jit_opts j;
	unsigned char *image = NULL;
	size_t image_size = 0;
	CUresult r = jit_options(&j, n, options, values);

	if (r == CUDA_SUCCESS)
		r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = link_run(&j, &in, 1, &image, &image_size);
	if (r == CUDA_SUCCESS)
		*cubin = image;
	return r;
}

/* Never refused: cudart hands its fat binaries to cuLibraryLoadData with
 * options of its own, which a load without JIT has always taken as hints. */
CUresult cu_jit_no_compile(unsigned int n, CUjit_option *options, void **values)
{
	struct jit_opts j = { 0 };

	for (unsigned int i = 0; options && values && i < n; i++)
		(void)jit_option(&j, options[i], &values[i]);
	log_none(j.info, j.info_size, j.info_slot);
	log_none(j.error, j.error_size, j.error_slot);
	return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState state)
{
	if (!link_valid(state))
		return CUDA_ERROR_INVALID_HANDLE;
	for (uint32_t i = 0; i < state->ninputs; i++)
		free(state->in[i].data);
	free(state->cubin);
	state->magic = 0;
	free(state);
	return CUDA_SUCCESS;
}
