/* SPDX-License-Identifier: MIT */
/*
 * Function attributes and occupancy, answered once per function: PyTorch's
 * kernels and cuBLAS ask them before launches (cudaFuncGetAttributes,
 * cudaOccupancyMaxActiveBlocksPerMultiprocessor: ~70% of the round trips of
 * a training step, measured), and the driver's answer changes only when the
 * function's attributes are set. So an answer is kept per function (and per
 * block size, shared memory and flags for occupancy) until FUNC_SET_ATTR of
 * that function, or until any module goes (an unload, a reset: its handles
 * may come back for other functions). cuDNN and cuBLAS also set the same
 * attribute to the same value before each launch (1070 FUNC_SET_ATTR in 30
 * ResNet-18 steps): a set that repeats the last one that succeeded changes
 * nothing, natively either, and is answered here. Bounded: fixed tables, a
 * newer answer takes an older one's slot. Beside them, launch.c's cluster
 * shapes known to launch, forgotten with the function's answers.
 */
#include <pthread.h>
#include <string.h>

#include "qcrt.h"

/*
 * Cluster shapes known to launch. Sent on its own, a LAUNCH_EX's answer is
 * whether the grid can run in those clusters (the cluster's size, and its
 * blocks' shared memory on one GPC); once a function has launched with a
 * block, cluster and shared memory, the same shape is posted like any
 * launch, whatever its grid (a multiple of the cluster): Hopper's cuBLASLt
 * launches every kernel so, and a round trip each made a small GEMM five
 * times slower (docs/performance.md). A failure of a posted one is the
 * stream's, reported at the next synchronize as for any launch. Bounded: a
 * fixed table, a newer shape takes an older one's slot.
 */
#define SHAPES 256 /* a power of two */

struct shape {
	uint64_t func; /* 0: empty */
	uint32_t block[3], cluster[3], shmem;
};

static struct shape shapes[SHAPES];
static pthread_mutex_t shapes_lock = PTHREAD_MUTEX_INITIALIZER;

static struct shape shape_of(const struct qcuda_args_launch_ex *x)
{
	struct shape s = { .func = x->func, .shmem = x->shared_mem };

	memcpy(s.block, x->block, sizeof(s.block));
	memcpy(s.cluster, x->cluster, sizeof(s.cluster));
	return s;
}

static struct shape *shape_slot(const struct shape *s)
{
	uint64_t h = s->func ^ ((uint64_t)s->block[0] << 20) ^ ((uint64_t)s->cluster[0] << 40) ^ s->shmem;

	return &shapes[(h * 0x9e3779b97f4a7c15ull) >> 56 & (SHAPES - 1)];
}

/* Whether x's shape launched before and its grid is whole clusters: then it may be posted. */
int qc_launch_shape_known(const struct qcuda_args_launch_ex *x)
{
	struct shape s = shape_of(x);
	int known;

	for (int i = 0; i < 3; i++)
		if (x->grid[i] % x->cluster[i])
			return 0;
	pthread_mutex_lock(&shapes_lock);
	known = !memcmp(shape_slot(&s), &s, sizeof(s));
	pthread_mutex_unlock(&shapes_lock);
	return known;
}

void qc_launch_shape_launched(const struct qcuda_args_launch_ex *x)
{
	struct shape s = shape_of(x);

	pthread_mutex_lock(&shapes_lock);
	*shape_slot(&s) = s;
	pthread_mutex_unlock(&shapes_lock);
}

/* Forgotten with what they name: function fh's when its attributes change, every one (fh 0)
 * when handles may be reused. */
static void launch_shapes_forget(uint64_t fh)
{
	pthread_mutex_lock(&shapes_lock);
	for (unsigned int i = 0; i < SHAPES; i++)
		if (!fh || shapes[i].func == fh)
			memset(&shapes[i], 0, sizeof(shapes[i]));
	pthread_mutex_unlock(&shapes_lock);
}

#define SLOTS 1024 /* each table; a power of two */

struct attrs_slot {
	uint64_t fh; /* 0: empty */
	struct qcuda_out_func_attrs out;
};

struct occ_slot {
	uint64_t fh, smem, blocks;
	int32_t block_size;
	uint32_t flags;
};

struct clus_slot {
	struct qcuda_args_cluster_occupancy q; /* q.func 0: empty */
	uint64_t answer;
};

struct set_slot {
	uint64_t fh;
	uint32_t attr;
	int32_t value;
};

static struct attrs_slot attrs[SLOTS];
static struct occ_slot occ[SLOTS];
static struct clus_slot clus[SLOTS];
static struct set_slot sets[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned int slot_of(uint64_t fh, uint64_t a, uint64_t b)
{
	uint64_t h = (fh ^ (a * 0x9e3779b97f4a7c15ull) ^ (b << 17)) * 0xff51afd7ed558ccdull;

	return (unsigned int)(h >> 40) & (SLOTS - 1);
}

cudaError_t qc_func_attrs(uint64_t fh, struct qcuda_out_func_attrs *out)
{
	struct attrs_slot *s = &attrs[slot_of(fh, 0, 0)];
	cudaError_t e;

	pthread_mutex_lock(&lock);
	if (fh && s->fh == fh) {
		*out = s->out;
		pthread_mutex_unlock(&lock);
		return cudaSuccess;
	}
	pthread_mutex_unlock(&lock);
	e = qc_req_func_attrs(fh, out);
	if (e == cudaSuccess && fh) {
		pthread_mutex_lock(&lock);
		s->fh = fh;
		s->out = *out;
		pthread_mutex_unlock(&lock);
	}
	return e;
}

cudaError_t qc_occupancy_blocks(uint64_t fh, uint64_t smem, int32_t block_size, uint32_t flags, uint64_t *blocks)
{
	struct occ_slot *s = &occ[slot_of(fh, smem, ((uint64_t)(uint32_t)block_size << 32) | flags)];
	cudaError_t e;

	pthread_mutex_lock(&lock);
	if (fh && s->fh == fh && s->smem == smem && s->block_size == block_size && s->flags == flags) {
		*blocks = s->blocks;
		pthread_mutex_unlock(&lock);
		return cudaSuccess;
	}
	pthread_mutex_unlock(&lock);
	/* OCCUPANCY_BLOCKS reads no num_blocks: 0 */
	e = qc_req_occupancy_blocks(fh, smem, block_size, flags, 0, blocks);
	if (e == cudaSuccess && fh) {
		pthread_mutex_lock(&lock);
		*s = (struct occ_slot){
			.fh = fh, .smem = smem, .blocks = *blocks, .block_size = block_size, .flags = flags
		};
		pthread_mutex_unlock(&lock);
	}
	return e;
}

/* cuOccupancyMaxActiveClusters (query 0) or MaxPotentialClusterSize (1) of
 * function fh launched so, with its cluster attributes among attrs (the
 * runtime's and the driver's are one layout): the host driver's answer,
 * which knows how clusters are placed within the GPU's GPCs. */
cudaError_t qc_occupancy_clusters(uint64_t fh, const unsigned int grid[3], const unsigned int block[3], uint32_t smem,
				  const cudaLaunchAttribute *attrs, unsigned int nattrs, uint32_t query,
				  uint64_t *answer)
{
	struct qcuda_args_cluster_occupancy q = {
		.func = fh,
		.grid = { grid[0], grid[1], grid[2] },
		.block = { block[0], block[1], block[2] },
		.smem = smem,
		.query = query,
	};
	uint64_t shape = ((uint64_t)q.grid[0] << 32 | q.block[0]);
	struct clus_slot *s;
	cudaError_t e;

	for (unsigned int i = 0; i < nattrs; i++) {
		if (attrs[i].id == cudaLaunchAttributeClusterDimension) {
			q.cluster[0] = attrs[i].val.clusterDim.x;
			q.cluster[1] = attrs[i].val.clusterDim.y;
			q.cluster[2] = attrs[i].val.clusterDim.z;
		} else if (attrs[i].id == cudaLaunchAttributeClusterSchedulingPolicyPreference) {
			q.policy = attrs[i].val.clusterSchedulingPolicyPreference;
		}
	}
	s = &clus[slot_of(q.func, shape ^ ((uint64_t)q.cluster[0] << 48 | q.smem), (uint64_t)q.query << 8 | q.policy)];
	pthread_mutex_lock(&lock);
	if (q.func && !memcmp(&s->q, &q, sizeof(q))) {
		*answer = s->answer;
		pthread_mutex_unlock(&lock);
		return cudaSuccess;
	}
	pthread_mutex_unlock(&lock);
	e = qc_req_occupancy_clusters(&q, answer);
	if (e == cudaSuccess && q.func) {
		pthread_mutex_lock(&lock);
		*s = (struct clus_slot){ .q = q, .answer = *answer };
		pthread_mutex_unlock(&lock);
	}
	return e;
}

/* A set that repeats the function's last successful one is answered here.
 * Otherwise, whatever the outcome, the function's answers are forgotten (a
 * failed set may still have changed something the next question sees). */
cudaError_t qc_func_set_attr(uint64_t fh, uint32_t attr, int32_t value)
{
	struct set_slot *s = &sets[slot_of(fh, attr, 1)];
	cudaError_t e;
	int same;

	pthread_mutex_lock(&lock);
	same = fh && s->fh == fh && s->attr == attr && s->value == value;
	pthread_mutex_unlock(&lock);
	if (same)
		return cudaSuccess;
	e = qc_req_func_set_attr(fh, attr, value);
	pthread_mutex_lock(&lock);
	for (unsigned int i = 0; i < SLOTS; i++) {
		if (attrs[i].fh == fh)
			attrs[i].fh = 0;
		if (occ[i].fh == fh)
			occ[i].fh = 0;
		if (clus[i].q.func == fh)
			memset(&clus[i], 0, sizeof(clus[i]));
		if (sets[i].fh == fh && sets[i].attr == attr)
			sets[i].fh = 0;
	}
	if (e == cudaSuccess)
		*s = (struct set_slot){ .fh = fh, .attr = attr, .value = value };
	pthread_mutex_unlock(&lock);
	launch_shapes_forget(fh);
	return e;
}

void qc_func_cache_clear(void)
{
	pthread_mutex_lock(&lock);
	memset(attrs, 0, sizeof(attrs));
	memset(occ, 0, sizeof(occ));
	memset(clus, 0, sizeof(clus));
	memset(sets, 0, sizeof(sets));
	pthread_mutex_unlock(&lock);
	launch_shapes_forget(0);
}
