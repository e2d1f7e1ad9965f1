/* SPDX-License-Identifier: MIT */
/*
 * What Hopper's libraries ask the driver before their kernels run, printed
 * so that the GPU run diffs NVIDIA's answers against qcuda's line by line
 * (test/gpu/run.sh runs it natively and under qcuda run): tensor maps
 * (cuTensorMapEncodeTiled / Im2col / ReplaceAddress, every byte of the
 * descriptor), refusals of bad ones, and cluster occupancy of a kernel
 * (drvapi.cubin, beside the program). With --unserved, also a call into a
 * slot of a private export table that qcuda does not serve (qcuda only: the
 * CI test checks it answers CUDA_ERROR_NOT_SUPPORTED rather than crashing).
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* The descriptor's words; one that holds an address in the buffer as buf+offset, since
 * the buffer lies elsewhere in each run (natively and under qcuda alike). */
static void print_map(const char *what, CUresult r, const CUtensorMap *m, CUdeviceptr buf)
{
	printf("%s: %s", what, name(r));
	for (int i = 0; r == CUDA_SUCCESS && i < 16; i++) {
		unsigned long long w = m->opaque[i];

		if (w >= buf && w < buf + (1 << 20))
			printf(" buf+%llx", w - buf);
		else
			printf(" %016llx", w);
	}
	putchar('\n');
}

static void tensor_maps(CUdeviceptr buf)
{
	static const struct {
		const char *what;
		CUtensorMapDataType type;
		unsigned int rank, elem;
		CUtensorMapSwizzle swizzle;
	} tiled[] = {
		{ "tiled fp16 rank 2 swizzle 128B", CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 2, CU_TENSOR_MAP_SWIZZLE_128B },
		{ "tiled bf16 rank 3 swizzle 64B", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, 2, CU_TENSOR_MAP_SWIZZLE_64B },
		{ "tiled fp32 rank 2 no swizzle", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, 4, CU_TENSOR_MAP_SWIZZLE_NONE },
		{ "tiled u8 rank 5 swizzle 32B", CU_TENSOR_MAP_DATA_TYPE_UINT8, 5, 1, CU_TENSOR_MAP_SWIZZLE_32B },
	};
	cuuint64_t dim[5] = { 256, 64, 4, 2, 2 }, strides[4];
	cuuint32_t box[5] = { 64, 32, 1, 1, 1 }, one[5] = { 1, 1, 1, 1, 1 };
	CUtensorMap m;
	CUresult r;

	for (unsigned int t = 0; t < sizeof(tiled) / sizeof(tiled[0]); t++) {
		strides[0] = dim[0] * tiled[t].elem;
		for (int i = 1; i < 4; i++)
			strides[i] = strides[i - 1] * dim[i];
		memset(&m, 0, sizeof(m));
		r = cuTensorMapEncodeTiled(&m, tiled[t].type, tiled[t].rank, (void *)buf, dim, strides, box, one,
					   CU_TENSOR_MAP_INTERLEAVE_NONE, tiled[t].swizzle,
					   CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
		print_map(tiled[t].what, r, &m, buf);
		if (t == 0) {
			r = cuTensorMapReplaceAddress(&m, (void *)(buf + 4096));
			print_map("the same, its address replaced", r, &m, buf);
		}
	}
	{
		int lower[3] = { -1, -1, 0 }, upper[3] = { 1, 1, 0 };
		cuuint64_t idim[4] = { 64, 16, 16, 2 }, istr[3] = { 128, 128 * 16, 128 * 256 };
		cuuint32_t ones[4] = { 1, 1, 1, 1 };

		memset(&m, 0, sizeof(m));
		r = cuTensorMapEncodeIm2col(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)buf, idim, istr, lower,
					    upper, 64, 32, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
					    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
					    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
		print_map("im2col fp16 rank 4", r, &m, buf);
	}
	/* Refused: a rank past 5, a box of 0, a misaligned address. */
	strides[0] = 512;
	r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 6, (void *)buf, dim, strides, box, one,
				   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
				   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	printf("rank 6: %s\n", name(r));
	box[0] = 0;
	r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)buf, dim, strides, box, one,
				   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
				   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	printf("a box of 0: %s\n", name(r));
	box[0] = 64;
	r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)(buf + 2), dim, strides, box, one,
				   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
				   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	printf("an address not 16-byte aligned: %s\n", name(r));
}

static void clusters(void)
{
	char path[4096];
	ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 32);
	CUmodule mod;
	CUfunction f;
	CUresult r;

	path[len > 0 ? len : 0] = 0;
	strcpy(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, "drvapi.cubin");
	r = cuModuleLoad(&mod, path);
	if (r == CUDA_SUCCESS)
		r = cuModuleGetFunction(&f, mod, "scale");
	if (r != CUDA_SUCCESS) {
		printf("clusters: no kernel: %s\n", name(r));
		return;
	}
	for (unsigned int c = 1; c <= 16; c *= 2) {
		CUlaunchAttribute a = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = { c, 1, 1 } };
		CUlaunchConfig cfg = { .gridDimX = 1024,
				       .gridDimY = 1,
				       .gridDimZ = 1,
				       .blockDimX = 256,
				       .blockDimY = 1,
				       .blockDimZ = 1,
				       .attrs = &a,
				       .numAttrs = 1 };
		int n = -1, size = -1;
		CUresult r1 = cuOccupancyMaxActiveClusters(&n, f, &cfg), r2;

		cfg.numAttrs = 0;
		r2 = cuOccupancyMaxPotentialClusterSize(&size, f, &cfg);
		printf("clusters of %u: max active %s %d; max potential size %s %d\n", c, name(r1), n, name(r2), size);
	}
}

/* A slot of cuBLASLt's private table that nothing was seen calling. */
static void unserved(void)
{
	static const CUuuid id = { { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24,
				     0xc8, 0xf2 } };
	const void *const *table = NULL;
	CUresult r = cuGetExportTable((const void **)&table, &id);

	printf("export table 21318c60: %s, %zu slots\n", name(r),
	       table ? (size_t)(uintptr_t)table[0] / sizeof(void *) : 0);
	if (r == CUDA_SUCCESS)
		printf("its slot 10: %s\n", name(((CUresult(*)(void))table[10])()));
}

int main(int argc, char **argv)
{
	CUdeviceptr buf;

	primary_context();
	if (cuMemAlloc(&buf, 1 << 20) != CUDA_SUCCESS) {
		printf("FAIL cuMemAlloc\n");
		return 1;
	}
	tensor_maps(buf);
	clusters();
	if (argc > 1 && !strcmp(argv[1], "--unserved"))
		unserved();
	cuMemFree(buf);
	return 0;
}
