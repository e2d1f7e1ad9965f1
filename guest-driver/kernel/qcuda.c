// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: virtio driver for the virtual CUDA device (virtio id 60).
 *
 * The device has num_queues request queues (from config space), each with
 * its own interrupt. A request is one descriptor chain (qcuda_proto.h):
 * device-readable {qcuda_req_hdr, arguments, data to the device} and
 * device-writable {qcuda_resp_hdr, output, data from the device}. User
 * space talks to the driver through ioctls on the misc device /dev/qcuda<N>
 * (qcuda_ioctl.h); each open file is one backend session.
 *
 * Operations and chunks: every round trip is a struct qcuda_op (a driver
 * command or a QCUDA_IOC_CALL), split into chunks of at most QCUDA_CHUNK
 * data bytes, one request each. The data is user memory, pinned chunk by
 * chunk (inside a mapping of the file's HOST_ALLOC memory: a reference on
 * the allocation instead) and passed as a scatterlist (physically contiguous
 * pages coalesced) through an indirect descriptor table (if that table
 * cannot be allocated, the call fails with -ENOMEM). Chunks are
 * submitted round robin over the queues and waited for only when
 * QCUDA_WINDOW of them are in flight, so a transfer of up to QCUDA_WINDOW
 * chunks is submitted whole before the first wait, and a larger one streams
 * through the window.
 *
 * Lifetimes: an op is reference counted (one reference for the caller, one
 * per chunk the device holds), so a caller killed while waiting never
 * unpins or frees what the device may still touch: the last reference
 * (possibly in the interrupt handler, then via a work item) does. Each op
 * holds a reference to its file. When the file is released the driver sends
 * SESSION_CLOSE at once, even with requests of the file still in the device
 * (the callback thread's CALLBACK_WAIT is always parked there, and a killed
 * process may leave calls waiting on a host function or an endless kernel):
 * the backend then answers every one of them. The file, its host memory and
 * the pages those requests use are freed only when the last op has come
 * back (or the device is gone).
 *
 * Bounds: one file may have at most file_slots requests in the device (a
 * quarter of all ring slots, at least QCUDA_MIN_FILE_SLOTS), so that one
 * process whose calls wait in the backend (behind a host function that
 * never returns, say) cannot take every ring slot of the VM; more callers
 * wait (killably) for one of the file's slots, as threads wait natively.
 * SESSION_CLOSE and CALLBACK_WAIT do not wait: the first must go out, and
 * the second is what lets calls parked behind a host function go on (the
 * backend parks at most a few per session and answers the rest at once).
 * Pinning: HOST_REGISTER pins (FOLL_LONGTERM) and HOST_ALLOC pages last
 * until freed, so they count in the caller's pinned_vm (VmPin) against
 * RLIMIT_MEMLOCK (-ENOMEM past it, unless CAP_IPC_LOCK), as RDMA
 * registrations do. A transfer pins its pages only while its requests are
 * in the device: at most QCUDA_WINDOW chunks (256 MiB) per call, and
 * file_slots chunks per file; that is not accounted.
 *
 * Concurrency: a request holds its queue's spinlock only while it is added
 * and the kick is prepared; callers then sleep on the chunk's completion,
 * which the queue's interrupt callback signals. No lock is held across a
 * round trip. Waits are killable: only a fatal signal interrupts a call.
 */
#include <linux/capability.h>
#include <linux/completion.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/rwsem.h>
#include <linux/scatterlist.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "qcuda_proto.h"
#include "qcuda_ioctl.h"

#define QCUDA_MAX_QUEUES 64
/* The fewest requests a file may have in flight, however small the rings. */
#define QCUDA_MIN_FILE_SLOTS 4
/* Chunks of one op in flight at once (16 x 16 MiB = 256 MiB): bounds what
 * one call pins and allocates, not the size of a transfer. */
#define QCUDA_WINDOW (SZ_256M / QCUDA_CHUNK)
/* Pages one chunk can touch (an unaligned chunk straddles one more): 4097.
 * So the chain of a chunk of scattered pages has up to 4101 descriptors
 * (header, arguments, data, response, output), more than a ring holds: it
 * can only go indirect, in a table that virtio_ring kmallocs atomically
 * (4101 x 16 bytes, just over 64 KiB: an order-5 allocation). See
 * qcuda_indirect_room(). */
#define QCUDA_CHUNK_PAGES (QCUDA_CHUNK / PAGE_SIZE + 1)
/* Retries, a tick apart (a second in all), of a chunk that can only go
 * indirect, before the call fails with -ENOMEM. */
#define QCUDA_INDIRECT_TRIES HZ

struct qcuda_queue {
	struct virtqueue *vq;
	spinlock_t lock;		/* serializes add/kick/get_buf on vq */
	wait_queue_head_t space_wq;	/* submitters waiting for ring space */
	char name[16];
};

struct qcuda_dev {
	struct virtio_device *vdev;
	struct kref kref;		/* probe + one per open file */
	struct miscdevice misc;
	char name[16];
	int index;

	/* Held for reading while a submitter touches a virtqueue; remove()
	 * takes it for writing before deleting the virtqueues. */
	struct rw_semaphore vq_sem;
	bool dead;			/* set under every queue lock */

	u32 num_queues;
	u32 queue_size;
	int file_slots;			/* requests one file may have in flight */
	u32 proto_version;
	u64 capabilities;
	atomic_t next_queue;		/* round robin */
	struct qcuda_queue *queues;
};

/* An open file: one backend session and the host memory it owns. */
struct qcuda_file {
	struct qcuda_dev *qd;
	/* The open file + one per op; at zero the file is freed. */
	refcount_t ref;
	u64 session;			/* 0 until the first CALL opened it */
	bool released;			/* release() ran; under lock */
	atomic_t inflight;		/* requests in the device */
	wait_queue_head_t slot_wq;	/* callers waiting for inflight < file_slots */
	struct mutex open_lock;		/* one SESSION_OPEN at a time */
	struct mutex lock;		/* hostmem, maps, next_token, session
					 * changes, released */
	struct list_head hostmem;	/* live HOST_ALLOCs and HOST_REGISTERs */
	struct list_head maps;		/* device mappings (HOST_MAP) */
	u64 next_token;			/* mmap offset of the next HOST_ALLOC */
};

/* HOST_ALLOC memory (our pages) or a HOST_REGISTER range (pinned user pages). */
struct qcuda_hostmem {
	struct list_head node;		/* in qf->hostmem while live */
	refcount_t ref;			/* the list + each VMA mapping it */
	bool registered;
	bool live;			/* in qf->hostmem; under qf->lock */
	unsigned int maps;		/* HOST_MAPs in flight or not undone;
					 * under qf->lock */
	u64 key;			/* mmap token, or the registered address */
	u64 size;			/* bytes from key */
	unsigned long npages;
	struct page **pages;
	struct mm_struct *mm;		/* whose pinned_vm counts it (grabbed) */
	unsigned long accounted;	/* pages counted there */
};

/* A device pointer HOST_MAP returned for memory of hm. */
struct qcuda_map {
	struct list_head node;
	u64 devptr;
	struct qcuda_hostmem *hm;
};

struct qcuda_op;

/* One request. The device-writable header sits in its own cache line,
 * apart from everything the CPU writes while the device owns it. */
struct qcuda_chunk {
	struct qcuda_op *op;
	struct completion done;
	int error;			/* -ENODEV if reclaimed by remove() */
	unsigned int used_len;		/* bytes the device wrote */
	bool busy;			/* submitted, not yet reaped */
	u64 len;			/* data bytes */
	unsigned int npages;		/* pinned pages, 0 if none */
	struct qcuda_hostmem *hm;	/* or the data lies in this HOST_ALLOC
					 * (referenced), nothing pinned */
	struct page **pages;		/* QCUDA_CHUNK_PAGES, allocated on first use */
	struct sg_table sgt;		/* the data */
	void *out;			/* output room of chunks > 0 (never read) */
	struct scatterlist sg_hdr, sg_args, sg_resp, sg_out;
	struct qcuda_req_hdr hdr;
	struct qcuda_resp_hdr resp ____cacheline_aligned;
};

/* One round trip, in chunks. Results are folded in as chunks are reaped
 * (in chunk order): status = the first failing one, with QCUDA_ST_OUTPUT
 * (a flag, not a failure) OR-ed in from any chunk; value and out from
 * chunk 0. */
struct qcuda_op {
	refcount_t ref;			/* the caller + one per chunk in the device */
	struct qcuda_file *qf;		/* holds a reference */
	struct work_struct free_work;
	u32 cmd, args_len, out_len, dir;
	u64 session;
	u64 data, data_len;		/* user buffer */
	u64 nchunks;
	void *args;			/* shared (read-only) by all chunks */
	void *out;			/* chunk 0's output */
	u32 status;
	u32 out_written;
	u64 value;
	bool reaped;			/* every chunk's result was folded in */
	unsigned int nslots;
	struct qcuda_chunk slot[] __counted_by(nslots);
};

/* A reply's status without the QCUDA_ST_OUTPUT flag: 0 when it succeeded. */
static inline u32 qcuda_st_err(u32 status)
{
	return status & ~QCUDA_ST_OUTPUT;
}

static DEFINE_IDA(qcuda_ida);
/* Frees ops whose last reference the device dropped (in interrupt context). */
static struct workqueue_struct *qcuda_wq;

static void qcuda_file_put(struct qcuda_file *qf);
static void qcuda_hostmem_put(struct qcuda_hostmem *hm);
static void qcuda_session_set(struct qcuda_file *qf, u64 session);
static int qcuda_session_open(struct qcuda_file *qf);
static void qcuda_slot_put(struct qcuda_file *qf);

static void qcuda_release_dev(struct kref *kref)
{
	struct qcuda_dev *qd = container_of(kref, struct qcuda_dev, kref);

	kfree(qd->queues);
	kfree(qd);
}

/* ---- operations ---- */

static void qcuda_chunk_unpin(struct qcuda_op *op, struct qcuda_chunk *c)
{
	if (c->hm) {
		/* Driver pages (no mapping, not on the LRU): nothing to dirty. */
		qcuda_hostmem_put(c->hm);
		c->hm = NULL;
	}
	if (c->npages) {
		if (op->dir == QCUDA_DATA_FROM_DEVICE)
			unpin_user_pages_dirty_lock(c->pages, c->npages, true);
		else
			unpin_user_pages(c->pages, c->npages);
		c->npages = 0;
	}
	sg_free_table(&c->sgt);
}

static void qcuda_op_free(struct qcuda_op *op)
{
	struct qcuda_file *qf = op->qf;
	struct qcuda_chunk *c = &op->slot[0];
	unsigned int i;

	for (i = 0; i < op->nslots; i++) {
		qcuda_chunk_unpin(op, &op->slot[i]);
		kvfree(op->slot[i].pages);
		kfree(op->slot[i].out);
	}
	/* A SESSION_OPEN whose caller was killed: the file adopts the session
	 * (or, if another caller opened one meanwhile, closes it). */
	if (op->cmd == QCUDA_CMD_SESSION_OPEN && !op->reaped &&
	    completion_done(&c->done) && !c->error &&
	    c->used_len >= sizeof(c->resp) &&
	    !qcuda_st_err(le32_to_cpu(c->resp.status)) && c->resp.value)
		qcuda_session_set(qf, le64_to_cpu(c->resp.value));
	kfree(op->args);
	kfree(op->out);
	kfree(op);
	qcuda_file_put(qf);
}

static void qcuda_op_free_work(struct work_struct *work)
{
	qcuda_op_free(container_of(work, struct qcuda_op, free_work));
}

/* The caller's reference; process context. */
static void qcuda_op_put(struct qcuda_op *op)
{
	if (refcount_dec_and_test(&op->ref))
		qcuda_op_free(op);
}

/* A chunk's device reference; interrupt context or under a queue lock. */
static void qcuda_op_put_dev(struct qcuda_op *op)
{
	if (refcount_dec_and_test(&op->ref))
		queue_work(qcuda_wq, &op->free_work);
}

/* Takes one of the file's request slots if one is free. */
static bool qcuda_slot_try(struct qcuda_file *qf)
{
	int n = atomic_read(&qf->inflight);

	do {
		if (n >= qf->qd->file_slots)
			return false;
	} while (!atomic_try_cmpxchg(&qf->inflight, &n, n + 1));
	return true;
}

/*
 * A slot of the file for one request of op, waiting killably while the
 * file has file_slots in the device (exclusive waits: a slot given back
 * wakes one caller). SESSION_CLOSE and CALLBACK_WAIT take theirs at once
 * (see the top of the file); they are counted all the same.
 */
static int qcuda_slot_get(struct qcuda_op *op)
{
	struct qcuda_file *qf = op->qf;

	if (op->cmd == QCUDA_CMD_SESSION_CLOSE || op->cmd == QCUDA_CMD_CALLBACK_WAIT) {
		atomic_inc(&qf->inflight);
		return 0;
	}
	if (qcuda_slot_try(qf))
		return 0;
	return wait_event_killable_exclusive(qf->slot_wq, qcuda_slot_try(qf)) ? -EINTR : 0;
}

/* The device gave a request back (or it never went in); any context. */
static void qcuda_slot_put(struct qcuda_file *qf)
{
	atomic_dec(&qf->inflight);
	if (wq_has_sleeper(&qf->slot_wq))
		wake_up(&qf->slot_wq);
}

static struct qcuda_op *qcuda_op_alloc(struct qcuda_file *qf, u32 cmd,
				       u32 args_len, u32 out_len, u32 dir,
				       u64 data, u64 data_len)
{
	u64 nchunks = data_len ? DIV_ROUND_UP_ULL(data_len, QCUDA_CHUNK) : 1;
	unsigned int nslots = min_t(u64, nchunks, QCUDA_WINDOW);
	struct qcuda_op *op;
	unsigned int i;

	op = kzalloc(struct_size(op, slot, nslots), GFP_KERNEL);
	if (!op)
		return NULL;
	refcount_set(&op->ref, 1);
	refcount_inc(&qf->ref);
	op->qf = qf;
	INIT_WORK(&op->free_work, qcuda_op_free_work);
	op->nslots = nslots;
	for (i = 0; i < nslots; i++) {
		op->slot[i].op = op;
		init_completion(&op->slot[i].done);
	}
	op->cmd = cmd;
	op->session = cmd < QCUDA_CMD_SESSION_CLOSE ? 0 : READ_ONCE(qf->session);
	op->args_len = args_len;
	op->out_len = out_len;
	op->dir = dir;
	op->data = data;
	op->data_len = data_len;
	op->nchunks = nchunks;
	if (args_len)
		op->args = kmalloc(args_len, GFP_KERNEL);
	if (out_len)
		op->out = kzalloc(out_len, GFP_KERNEL);
	if ((args_len && !op->args) || (out_len && !op->out)) {
		qcuda_op_put(op);
		return NULL;
	}
	return op;
}

/* Interrupt callback of one request queue: complete every used buffer. */
static void qcuda_vq_done(struct virtqueue *vq)
{
	struct qcuda_dev *qd = vq->vdev->priv;
	struct qcuda_queue *q = &qd->queues[vq->index];
	struct qcuda_chunk *c;
	unsigned long flags;
	unsigned int len;

	spin_lock_irqsave(&q->lock, flags);
	do {
		virtqueue_disable_cb(vq);
		while ((c = virtqueue_get_buf(vq, &len)) != NULL) {
			c->used_len = len;
			complete(&c->done);
			qcuda_slot_put(c->op->qf);
			qcuda_op_put_dev(c->op);
		}
	} while (!virtqueue_enable_cb(vq));
	spin_unlock_irqrestore(&q->lock, flags);
	if (wq_has_sleeper(&q->space_wq))
		wake_up(&q->space_wq);
}

/* Sleeps a tick before a retry (killably, where the caller can be killed). */
static void qcuda_nap(bool killable)
{
	if (killable)
		schedule_timeout_killable(1);
	else
		schedule_timeout_uninterruptible(1);
}

/*
 * A chain longer than the ring can only go in through an indirect table,
 * which virtio_ring allocates atomically, under the queue lock: for a chunk
 * of scattered pages an order-5 block, which can fail for a long time while
 * memory is fragmented (retrying alone could wait forever). Before each
 * retry, allocate a block of the table's size here, where we may sleep
 * (reclaim, compaction), and free it for the retry to take (blocks of that
 * order go straight back to the buddy lists). -ENOMEM if even that fails,
 * or after QCUDA_INDIRECT_TRIES retries, a tick apart after the first.
 * (Kernels that keep state beside each table entry allocate more than
 * this: there the block helps less, and the retries still end.)
 */
static int qcuda_indirect_room(unsigned int nsg, unsigned int *tries,
			       bool killable)
{
	void *table;

	if ((*tries)++) {
		if (*tries > QCUDA_INDIRECT_TRIES)
			return -ENOMEM;
		qcuda_nap(killable);
	}
	table = kmalloc_array(nsg, sizeof(struct vring_desc),
			      GFP_KERNEL | __GFP_NOWARN);
	if (!table)
		return -ENOMEM;
	kfree(table);
	return 0;
}

/*
 * Queue one chunk and kick the device; on success the device holds a
 * reference to the op. Waits while the ring is full: killably, or (for
 * SESSION_CLOSE from release, which must go out) until the ring has room
 * or the device is gone. A chain longer than the ring whose indirect table
 * cannot be allocated fails with -ENOMEM (qcuda_indirect_room()).
 */
static int qcuda_submit(struct qcuda_dev *qd, struct qcuda_queue *q,
			struct qcuda_chunk *c, struct scatterlist **sgs,
			unsigned int out_sgs, unsigned int in_sgs, bool killable)
{
	unsigned int free, n, nsg = 0, tries = 0;
	bool notify = false;
	int err;

	for (n = 0; n < out_sgs + in_sgs; n++)
		nsg += sg_nents(sgs[n]);
	down_read(&qd->vq_sem);
	for (;;) {
		spin_lock_irq(&q->lock);
		if (qd->dead) {
			err = -ENODEV;
		} else {
			/* No warning: a failed table allocation is handled. */
			err = virtqueue_add_sgs(q->vq, sgs, out_sgs, in_sgs, c,
						GFP_ATOMIC | __GFP_NOWARN);
			if (!err) {
				refcount_inc(&c->op->ref);
				notify = virtqueue_kick_prepare(q->vq);
			}
		}
		free = err ? q->vq->num_free : 0;
		spin_unlock_irq(&q->lock);
		if (err != -ENOSPC)
			break;
		if (killable && fatal_signal_pending(current)) {
			err = -EINTR;
			break;
		}
		if (free && nsg > virtqueue_get_vring_size(q->vq)) {
			/* Room in the ring: the atomic allocation of the
			 * indirect table failed, and the chain can never go
			 * in direct. */
			err = qcuda_indirect_room(nsg, &tries, killable);
			if (err) {
				dev_warn_ratelimited(&qd->vdev->dev,
						     "no memory for the indirect table of a %u-descriptor request\n",
						     nsg);
				break;
			}
		} else if (free) {
			/* Room in the ring: the atomic allocation of the
			 * indirect table failed. The chain goes in direct
			 * once enough of the ring is free: retry a little
			 * later. */
			qcuda_nap(killable);
		} else if (killable) {
			if (wait_event_killable(q->space_wq, READ_ONCE(qd->dead) ||
						READ_ONCE(q->vq->num_free)))
				err = -EINTR;
		} else {
			wait_event(q->space_wq, READ_ONCE(qd->dead) ||
				   READ_ONCE(q->vq->num_free));
		}
		if (err == -EINTR)
			break;
	}
	if (notify)
		virtqueue_notify(q->vq);
	up_read(&qd->vq_sem);
	return err;
}

static const struct vm_operations_struct qcuda_vm_ops;

/*
 * If the n pages from user address start lie in one mapping of a HOST_ALLOC
 * of this file (with the access the transfer needs), take a reference on
 * that allocation for the chunk and return its pages. They are the driver's
 * own (MAP_SHARED, inserted on fault: the mapping always shows them), so
 * they need no pinning, and pin_user_pages_fast() would take its slow path
 * on them (GUP-fast refuses pages without a mapping). The reference keeps
 * them past HOST_FREE, munmap and close until the chunk is released, as a
 * pin would. Anything else (other VMAs, a range not wholly inside one such
 * mapping) returns NULL and goes through GUP.
 */
static struct page **qcuda_chunk_hold(struct qcuda_op *op, struct qcuda_chunk *c,
				      unsigned long start, unsigned int n)
{
	vm_flags_t need = op->dir == QCUDA_DATA_FROM_DEVICE ? VM_WRITE : VM_READ;
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	struct qcuda_hostmem *hm;
	struct page **pages = NULL;
	unsigned long first;

	if (!mm)
		return NULL;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, start);
	if (!vma || vma->vm_ops != &qcuda_vm_ops || !vma->vm_file ||
	    vma->vm_file->private_data != op->qf || !(vma->vm_flags & need) ||
	    n > (vma->vm_end - start) >> PAGE_SHIFT)
		goto out;
	/* The VMA holds a reference to hm and cannot go while we hold the
	 * mmap lock. */
	hm = vma->vm_private_data;
	first = vma->vm_pgoff + ((start - vma->vm_start) >> PAGE_SHIFT) -
		(hm->key >> PAGE_SHIFT);
	if (first >= hm->npages || n > hm->npages - first)
		goto out;
	refcount_inc(&hm->ref);
	c->hm = hm;
	pages = hm->pages + first;
out:
	mmap_read_unlock(mm);
	return pages;
}

/* Pin the user pages of chunk c (data at addr) and build its scatterlist. */
static int qcuda_chunk_pin(struct qcuda_op *op, struct qcuda_chunk *c, u64 addr)
{
	unsigned long start = addr & PAGE_MASK;
	unsigned int offset = offset_in_page(addr);
	unsigned int n = DIV_ROUND_UP(offset + c->len, PAGE_SIZE);
	unsigned int gup = op->dir == QCUDA_DATA_FROM_DEVICE ? FOLL_WRITE : 0;
	struct page **pages;
	int got, err;

	pages = qcuda_chunk_hold(op, c, start, n);
	if (!pages && !c->pages) {
		c->pages = kvmalloc_array(QCUDA_CHUNK_PAGES, sizeof(*c->pages),
					  GFP_KERNEL);
		if (!c->pages)
			return -ENOMEM;
	}
	while (!pages && c->npages < n) {
		got = pin_user_pages_fast(start + ((unsigned long)c->npages << PAGE_SHIFT),
					  n - c->npages, gup, c->pages + c->npages);
		if (got <= 0) {
			err = got ? got : -EFAULT;
			goto fail;
		}
		c->npages += got;
	}
	/* Physically contiguous pages become one entry. */
	err = sg_alloc_table_from_pages_segment(&c->sgt, pages ?: c->pages, n,
						offset, c->len, UINT_MAX,
						GFP_KERNEL);
	if (!err)
		return 0;
fail:
	qcuda_chunk_unpin(op, c);
	return err;
}

/* Build chunk i of op in slot c and submit it to queue qi. */
static int qcuda_chunk_start(struct qcuda_op *op, struct qcuda_chunk *c,
			     u64 i, u32 qi, bool killable)
{
	struct qcuda_dev *qd = op->qf->qd;
	struct scatterlist *sgs[6];
	unsigned int nout = 0, nin = 0;
	u64 off = i * QCUDA_CHUNK;
	void *out = op->out;
	int err;

	c->len = op->data_len ? min_t(u64, op->data_len - off, QCUDA_CHUNK) : 0;
	c->hdr.cmd = cpu_to_le32(op->cmd);
	c->hdr.len = cpu_to_le32(op->args_len);
	c->hdr.session = cpu_to_le64(op->session);
	c->hdr.data_offset = cpu_to_le64(c->len ? off : 0);
	c->hdr.data_len = cpu_to_le64(c->len);
	c->error = 0;
	c->used_len = 0;
	reinit_completion(&c->done);

	if (i && op->out_len) {
		/* Every chunk needs the output room (the data follows it);
		 * only chunk 0's output is used. */
		if (!c->out)
			c->out = kmalloc(op->out_len, GFP_KERNEL);
		if (!c->out)
			return -ENOMEM;
		out = c->out;
	}
	/* Before pinning: a caller waiting for a slot holds no pages. */
	err = qcuda_slot_get(op);
	if (err)
		return err;
	if (c->len) {
		err = qcuda_chunk_pin(op, c, op->data + off);
		if (err) {
			qcuda_slot_put(op->qf);
			return err;
		}
	}

	sg_init_one(&c->sg_hdr, &c->hdr, sizeof(c->hdr));
	sgs[nout++] = &c->sg_hdr;
	if (op->args_len) {
		sg_init_one(&c->sg_args, op->args, op->args_len);
		sgs[nout++] = &c->sg_args;
	}
	if (c->len && op->dir == QCUDA_DATA_TO_DEVICE)
		sgs[nout++] = c->sgt.sgl;
	sg_init_one(&c->sg_resp, &c->resp, sizeof(c->resp));
	sgs[nout + nin++] = &c->sg_resp;
	if (op->out_len) {
		sg_init_one(&c->sg_out, out, op->out_len);
		sgs[nout + nin++] = &c->sg_out;
	}
	if (c->len && op->dir == QCUDA_DATA_FROM_DEVICE)
		sgs[nout + nin++] = c->sgt.sgl;

	err = qcuda_submit(qd, &qd->queues[qi], c, sgs, nout, nin, killable);
	if (err) {
		qcuda_slot_put(op->qf);
		qcuda_chunk_unpin(op, c);
		return err;
	}
	c->busy = true;
	return 0;
}

/* Wait (killably) for chunk i in slot c, release its pages, fold in its result. */
static int qcuda_chunk_reap(struct qcuda_op *op, struct qcuda_chunk *c, u64 i)
{
	u32 status, len;

	if (wait_for_completion_killable(&c->done))
		return -EINTR;	/* the device's reference keeps op alive */
	c->busy = false;
	qcuda_chunk_unpin(op, c);
	if (c->error)
		return c->error;
	if (c->used_len < sizeof(c->resp))
		return -EPROTO;
	status = le32_to_cpu(c->resp.status);
	if (qcuda_st_err(status) && !qcuda_st_err(op->status))
		op->status |= status;
	else
		op->status |= status & QCUDA_ST_OUTPUT;
	if (i == 0) {
		len = le32_to_cpu(c->resp.len);
		if (len > op->out_len || c->used_len < sizeof(c->resp) + len)
			return -EPROTO;
		op->out_written = len;
		op->value = le64_to_cpu(c->resp.value);
	}
	return 0;
}

/*
 * Run op: submit its chunks round robin over the queues, starting at queue
 * (or the next queue in turn, QCUDA_QUEUE_ANY), and wait for every chunk
 * submitted, even after an error, so the call never returns while the
 * device still uses the caller's buffer - except on a fatal signal.
 */
static int qcuda_op_run(struct qcuda_op *op, u32 queue)
{
	struct qcuda_dev *qd = op->qf->qd;
	u32 base = queue == QCUDA_QUEUE_ANY ?
		   (u32)atomic_inc_return(&qd->next_queue) : queue;
	u64 i, submitted = 0, reaped = 0;
	int err = 0, e;

	for (i = 0; i < op->nchunks && !err; i++) {
		struct qcuda_chunk *c = &op->slot[i % op->nslots];

		if (c->busy) {		/* the window is full */
			err = qcuda_chunk_reap(op, c, reaped++);
			if (err == -EINTR)
				return err;
			if (err)
				break;
		}
		err = qcuda_chunk_start(op, c, i, (base + i) % qd->num_queues, true);
		if (!err)
			submitted++;
	}
	for (; reaped < submitted; reaped++) {
		e = qcuda_chunk_reap(op, &op->slot[reaped % op->nslots], reaped);
		if (e == -EINTR)
			return e;
		if (!err)
			err = e;
	}
	op->reaped = true;
	return err;
}

/* ---- host memory ---- */

/*
 * Count npages of long-term pinned memory for hm in the caller's
 * pinned_vm, against RLIMIT_MEMLOCK unless it has CAP_IPC_LOCK (as RDMA's
 * ib_umem_get() does); -ENOMEM past the limit. Undone when hm is freed,
 * possibly after the process is gone: hm keeps the mm_struct (not its
 * address space).
 */
static int qcuda_hostmem_account(struct qcuda_hostmem *hm, unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;

	if (!mm)
		return -EFAULT;
	if (atomic64_add_return(npages, &mm->pinned_vm) > limit &&
	    !capable(CAP_IPC_LOCK)) {
		atomic64_sub(npages, &mm->pinned_vm);
		return -ENOMEM;
	}
	mmgrab(mm);
	hm->mm = mm;
	hm->accounted = npages;
	return 0;
}

static void qcuda_hostmem_put(struct qcuda_hostmem *hm)
{
	unsigned long i;

	if (!refcount_dec_and_test(&hm->ref))
		return;
	if (hm->mm) {
		atomic64_sub(hm->accounted, &hm->mm->pinned_vm);
		mmdrop(hm->mm);
	}
	if (hm->registered) {
		/* The device may have written them. */
		unpin_user_pages_dirty_lock(hm->pages, hm->npages, true);
	} else {
		for (i = 0; i < hm->npages; i++)
			if (hm->pages[i])
				put_page(hm->pages[i]);
	}
	kvfree(hm->pages);
	kfree(hm);
}

static struct qcuda_hostmem *qcuda_hostmem_new(unsigned long npages)
{
	struct qcuda_hostmem *hm = kzalloc(sizeof(*hm), GFP_KERNEL);

	if (!hm)
		return NULL;
	refcount_set(&hm->ref, 1);
	hm->pages = kvcalloc(npages, sizeof(*hm->pages), GFP_KERNEL);
	if (!hm->pages) {
		kfree(hm);
		return NULL;
	}
	hm->npages = npages;
	return hm;
}

/* Are the n pages from p physically consecutive? */
static bool qcuda_pages_contig(struct page **p, unsigned long n)
{
	unsigned long i, pfn = page_to_pfn(p[0]);

	for (i = 1; i < n; i++)
		if (page_to_pfn(p[i]) != pfn + i)
			return false;
	return true;
}

/* Guest-physical address of [addr, addr+size) within hm (whose page 0
 * holds address key), or 0 if its pages are not contiguous. */
static u64 qcuda_hostmem_gpa(struct qcuda_hostmem *hm, u64 addr, u64 size)
{
	unsigned long first = (addr >> PAGE_SHIFT) - (hm->key >> PAGE_SHIFT);
	unsigned long n = ((addr + size - 1) >> PAGE_SHIFT) - (addr >> PAGE_SHIFT) + 1;

	if (first + n > hm->npages || !qcuda_pages_contig(hm->pages + first, n))
		return 0;
	return page_to_phys(hm->pages[first]) + offset_in_page(addr);
}

/*
 * Zeroed pages for HOST_ALLOC. Each page gets its own reference count
 * (split_page), so that mappings can take and drop them one by one.
 * Contiguous: one block, at most MAX_PAGE_ORDER (4 MiB): this kernel has
 * no CMA and does not export alloc_contig_pages(). Otherwise the largest
 * blocks that are free, for short scatterlists.
 */
static int qcuda_hostmem_alloc(struct qcuda_hostmem *hm, bool contig)
{
	const gfp_t gfp = GFP_HIGHUSER | __GFP_ZERO | __GFP_ACCOUNT;
	unsigned int order = get_order(hm->npages << PAGE_SHIFT);
	unsigned long i = 0, k;
	struct page *p;

	if (contig) {
		if (order > MAX_PAGE_ORDER)
			return -ENOMEM;
		p = alloc_pages(gfp | __GFP_RETRY_MAYFAIL | __GFP_NOWARN, order);
		if (!p)
			return -ENOMEM;
		split_page(p, order);
		for (k = 0; k < 1ul << order; k++) {
			if (k < hm->npages)
				hm->pages[k] = p + k;
			else
				__free_page(p + k);
		}
		return 0;
	}
	order = MAX_PAGE_ORDER;
	while (i < hm->npages) {
		order = min_t(unsigned int, order, ilog2(hm->npages - i));
		p = alloc_pages(order ? gfp | __GFP_NORETRY | __GFP_NOWARN : gfp,
				order);
		if (!p) {
			if (!order)
				return -ENOMEM;
			order--;
			continue;
		}
		if (order)
			split_page(p, order);
		for (k = 0; k < 1ul << order; k++)
			hm->pages[i++] = p + k;
		if (fatal_signal_pending(current))
			return -EINTR;
	}
	return 0;
}

/* Find and unlink the live hostmem with this key; -EBUSY while mapped. */
static int qcuda_hostmem_remove(struct qcuda_file *qf, u64 key, bool registered)
{
	struct qcuda_hostmem *hm, *found = NULL;
	int err = -EINVAL;

	mutex_lock(&qf->lock);
	list_for_each_entry(hm, &qf->hostmem, node) {
		if (hm->key == key && hm->registered == registered) {
			found = hm;
			break;
		}
	}
	if (found && found->maps) {
		err = -EBUSY;
	} else if (found) {
		list_del(&found->node);
		found->live = false;
		err = 0;
	}
	mutex_unlock(&qf->lock);
	if (!err)
		qcuda_hostmem_put(found);
	return err;
}

static long qcuda_ioctl_host_alloc(struct qcuda_file *qf,
				   struct qcuda_host_alloc __user *uarg)
{
	struct qcuda_host_alloc a;
	struct qcuda_hostmem *hm;
	int err;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.size || (a.flags & ~QCUDA_HOST_CONTIGUOUS) || a.reserved)
		return -EINVAL;
	if (a.size > (u64)totalram_pages() << PAGE_SHIFT)
		return -ENOMEM;
	hm = qcuda_hostmem_new(PAGE_ALIGN(a.size) >> PAGE_SHIFT);
	if (!hm)
		return -ENOMEM;
	hm->size = (u64)hm->npages << PAGE_SHIFT;
	/* The pages stay until HOST_FREE and the last munmap: long-term. */
	err = qcuda_hostmem_account(hm, hm->npages);
	if (!err)
		err = qcuda_hostmem_alloc(hm, a.flags & QCUDA_HOST_CONTIGUOUS);
	if (err) {
		qcuda_hostmem_put(hm);
		return err;
	}
	a.gpa = qcuda_pages_contig(hm->pages, hm->npages) ?
		page_to_phys(hm->pages[0]) : 0;

	mutex_lock(&qf->lock);
	hm->key = qf->next_token;
	qf->next_token += hm->size;
	list_add(&hm->node, &qf->hostmem);
	hm->live = true;
	mutex_unlock(&qf->lock);

	a.mmap_offset = hm->key;
	if (copy_to_user(uarg, &a, sizeof(a))) {
		qcuda_hostmem_remove(qf, hm->key, false);
		return -EFAULT;
	}
	return 0;
}

static long qcuda_ioctl_host_register(struct qcuda_file *qf,
				      struct qcuda_host_register __user *uarg)
{
	struct qcuda_host_register a;
	struct qcuda_hostmem *hm, *o;
	unsigned long npages, pinned = 0;
	int got, err = 0;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.size || a.flags || a.reserved)
		return -EINVAL;
	if (!access_ok(u64_to_user_ptr(a.addr), a.size))
		return -EFAULT;
	npages = DIV_ROUND_UP(offset_in_page(a.addr) + a.size, PAGE_SIZE);
	if (npages > totalram_pages())
		return -ENOMEM;
	hm = qcuda_hostmem_new(npages);
	if (!hm)
		return -ENOMEM;
	/* Long-term pin: the GPU may use these pages until unregistered. */
	err = qcuda_hostmem_account(hm, npages);
	while (!err && pinned < npages) {
		got = pin_user_pages_fast((a.addr & PAGE_MASK) + (pinned << PAGE_SHIFT),
					  min_t(unsigned long, npages - pinned, SZ_1M),
					  FOLL_WRITE | FOLL_LONGTERM, hm->pages + pinned);
		if (got <= 0) {
			err = got ? got : -EFAULT;
			break;
		}
		pinned += got;
	}
	hm->npages = pinned;
	hm->registered = true;
	if (err) {
		qcuda_hostmem_put(hm);
		return err;
	}
	hm->key = a.addr;
	hm->size = a.size;
	a.gpa = qcuda_hostmem_gpa(hm, a.addr, a.size);

	mutex_lock(&qf->lock);
	list_for_each_entry(o, &qf->hostmem, node) {
		if (o->registered && a.addr < o->key + o->size &&
		    o->key < a.addr + a.size)
			err = -EEXIST;
	}
	if (!err) {
		list_add(&hm->node, &qf->hostmem);
		hm->live = true;
	}
	mutex_unlock(&qf->lock);
	if (err) {
		qcuda_hostmem_put(hm);
		return err;
	}
	if (put_user(a.gpa, &uarg->gpa)) {
		qcuda_hostmem_remove(qf, a.addr, true);
		return -EFAULT;
	}
	return 0;
}

static long qcuda_ioctl_gpa(struct file *f, struct qcuda_gpa __user *uarg)
{
	struct qcuda_file *qf = f->private_data;
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	struct qcuda_hostmem *hm;
	struct qcuda_gpa a;
	u64 gpa = 0;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.size || a.addr + a.size < a.addr)
		return -EINVAL;

	mutex_lock(&qf->lock);
	list_for_each_entry(hm, &qf->hostmem, node) {
		if (hm->registered && a.addr >= hm->key &&
		    a.addr + a.size <= hm->key + hm->size) {
			gpa = qcuda_hostmem_gpa(hm, a.addr, a.size);
			break;
		}
	}
	mutex_unlock(&qf->lock);

	if (!gpa) {		/* a mapping of a HOST_ALLOC? */
		mmap_read_lock(mm);
		vma = vma_lookup(mm, a.addr);
		if (vma && vma->vm_file == f && vma->vm_ops == &qcuda_vm_ops &&
		    a.addr + a.size <= vma->vm_end) {
			u64 at = ((u64)vma->vm_pgoff << PAGE_SHIFT) +
				 (a.addr - vma->vm_start);

			hm = vma->vm_private_data;
			mutex_lock(&qf->lock);
			if (hm->live)
				gpa = qcuda_hostmem_gpa(hm, at, a.size);
			mutex_unlock(&qf->lock);
		}
		mmap_read_unlock(mm);
	}
	if (!gpa)
		return -EINVAL;
	return put_user(gpa, &uarg->gpa) ? -EFAULT : 0;
}

/* mmap of a HOST_ALLOC: pages are inserted on fault; each VMA holds a
 * reference to the allocation (its pages outlive HOST_FREE until unmapped). */
static vm_fault_t qcuda_vm_fault(struct vm_fault *vmf)
{
	struct qcuda_hostmem *hm = vmf->vma->vm_private_data;
	unsigned long i = vmf->pgoff - (hm->key >> PAGE_SHIFT);

	if (i >= hm->npages)
		return VM_FAULT_SIGBUS;
	get_page(hm->pages[i]);
	vmf->page = hm->pages[i];
	return 0;
}

static void qcuda_vm_open(struct vm_area_struct *vma)
{
	struct qcuda_hostmem *hm = vma->vm_private_data;

	refcount_inc(&hm->ref);
}

static void qcuda_vm_close(struct vm_area_struct *vma)
{
	qcuda_hostmem_put(vma->vm_private_data);
}

static const struct vm_operations_struct qcuda_vm_ops = {
	.open = qcuda_vm_open,
	.close = qcuda_vm_close,
	.fault = qcuda_vm_fault,
};

static int qcuda_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct qcuda_file *qf = f->private_data;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;
	struct qcuda_hostmem *hm, *found = NULL;

	/* A private mapping would copy on write, away from what the GPU sees. */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	mutex_lock(&qf->lock);
	list_for_each_entry(hm, &qf->hostmem, node) {
		if (!hm->registered && off >= hm->key &&
		    off - hm->key < hm->size && len <= hm->size - (off - hm->key)) {
			refcount_inc(&hm->ref);
			found = hm;
			break;
		}
	}
	mutex_unlock(&qf->lock);
	if (!found)
		return -EINVAL;
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vma->vm_private_data = found;
	vma->vm_ops = &qcuda_vm_ops;
	return 0;
}

/*
 * HOST_MAP hands guest-physical memory to the GPU, and the backend cannot
 * tell whose memory it is: only physically contiguous pages of this file's
 * own live host memory may be named. That memory then stays (HOST_FREE and
 * HOST_UNREGISTER answer EBUSY) until the mapping is undone.
 */
static int qcuda_map_begin(struct qcuda_file *qf, struct qcuda_op *op,
			   struct qcuda_hostmem **mapped)
{
	const struct qcuda_args_host_map *a = op->args;
	struct qcuda_hostmem *hm;
	unsigned long first, n, i;
	u64 gpa, size;

	if (op->args_len != sizeof(*a))
		return -EINVAL;
	gpa = le64_to_cpu(a->gpa);
	size = le64_to_cpu(a->size);
	if (!size || gpa + size < gpa)
		return -EINVAL;
	first = PHYS_PFN(gpa);
	n = PHYS_PFN(gpa + size - 1) - first + 1;

	mutex_lock(&qf->lock);
	list_for_each_entry(hm, &qf->hostmem, node) {
		for (i = 0; i + n <= hm->npages; i++) {
			if (page_to_pfn(hm->pages[i]) == first &&
			    qcuda_pages_contig(hm->pages + i, n)) {
				hm->maps++;
				*mapped = hm;
				goto out;
			}
		}
	}
out:
	mutex_unlock(&qf->lock);
	return *mapped ? 0 : -EINVAL;
}

/* After the HOST_MAP round trip: record the device pointer, or (if it
 * surely failed) drop the hold. */
static void qcuda_map_end(struct qcuda_file *qf, struct qcuda_hostmem *hm,
			  int err, struct qcuda_op *op)
{
	struct qcuda_map *m = NULL;

	if (!err && !qcuda_st_err(op->status))
		m = kmalloc(sizeof(*m), GFP_KERNEL);
	mutex_lock(&qf->lock);
	if (m) {
		m->devptr = op->value;
		m->hm = hm;
		list_add(&m->node, &qf->maps);
	} else if ((!err && qcuda_st_err(op->status)) || err == -ENODEV) {
		hm->maps--;
	}
	/* Otherwise the device may hold a mapping: kept until close. */
	mutex_unlock(&qf->lock);
}

/*
 * After a successful HOST_UNMAP (devptr) or DEVICE_RESET (all): drop the
 * holds of the mappings that had completed (qf->maps). A HOST_MAP still in
 * flight keeps its hold: qcuda_map_end() drops it if the mapping failed
 * (the backend fails one that completes after the reset) and records it
 * otherwise; it may then outlive the reset, which only keeps the memory
 * until close.
 */
static void qcuda_unmap(struct qcuda_file *qf, bool all, u64 devptr)
{
	struct qcuda_map *m, *t;

	mutex_lock(&qf->lock);
	list_for_each_entry_safe(m, t, &qf->maps, node) {
		if (all || m->devptr == devptr) {
			m->hm->maps--;
			list_del(&m->node);
			kfree(m);
			if (!all)
				break;
		}
	}
	mutex_unlock(&qf->lock);
}

/* ---- ioctls ---- */

static long qcuda_ioctl_call(struct qcuda_file *qf, struct qcuda_call __user *uarg)
{
	struct qcuda_hostmem *mapped = NULL;
	struct qcuda_call a;
	struct qcuda_op *op;
	long ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.cmd < QCUDA_CMD_HELLO || a.args_len > QCUDA_MAX_ARGS ||
	    a.out_len > QCUDA_MAX_OUT || a.data_dir > QCUDA_DATA_FROM_DEVICE ||
	    (a.data_dir == QCUDA_DATA_NONE && a.data_len))
		return -EINVAL;
	if (a.data_len && !access_ok(u64_to_user_ptr(a.data), a.data_len))
		return -EFAULT;
	ret = qcuda_session_open(qf);
	if (ret)
		return ret;

	op = qcuda_op_alloc(qf, a.cmd, a.args_len, a.out_len, a.data_dir,
			    a.data, a.data_len);
	if (!op)
		return -ENOMEM;
	if (a.args_len && copy_from_user(op->args, u64_to_user_ptr(a.args), a.args_len)) {
		ret = -EFAULT;
		goto out;
	}
	if (a.cmd == QCUDA_CMD_HOST_MAP) {
		ret = qcuda_map_begin(qf, op, &mapped);
		if (ret)
			goto out;
	}

	ret = qcuda_op_run(op, QCUDA_QUEUE_ANY);

	if (mapped)
		qcuda_map_end(qf, mapped, ret, op);
	if (ret)
		goto out;
	if (!qcuda_st_err(op->status) && a.cmd == QCUDA_CMD_HOST_UNMAP &&
	    a.args_len == sizeof(struct qcuda_args_ptr))
		qcuda_unmap(qf, false, le64_to_cpu(((struct qcuda_args_ptr *)op->args)->ptr));
	if (!qcuda_st_err(op->status) && a.cmd == QCUDA_CMD_DEVICE_RESET)
		qcuda_unmap(qf, true, 0);

	if (op->out_written &&
	    copy_to_user(u64_to_user_ptr(a.out), op->out, op->out_written)) {
		ret = -EFAULT;
		goto out;
	}
	a.status = op->status;
	a.out_written = op->out_written;
	a.value = op->value;
	if (copy_to_user(&uarg->status, &a.status,
			 sizeof(a) - offsetof(struct qcuda_call, status)))
		ret = -EFAULT;
out:
	qcuda_op_put(op);
	return ret;
}

static long qcuda_ioctl_nop(struct qcuda_file *qf, struct qcuda_nop __user *arg)
{
	struct qcuda_dev *qd = qf->qd;
	struct qcuda_nop a;
	struct qcuda_op *op;
	long ret;

	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.queue != QCUDA_QUEUE_ANY && a.queue >= qd->num_queues)
		return -EINVAL;
	op = qcuda_op_alloc(qf, QCUDA_CMD_NOP, sizeof(__le64), sizeof(__le64),
			    QCUDA_DATA_NONE, 0, 0);
	if (!op)
		return -ENOMEM;
	*(__le64 *)op->args = cpu_to_le64(a.cookie);

	ret = qcuda_op_run(op, a.queue);
	if (!ret && qcuda_st_err(op->status)) {
		dev_dbg(&qd->vdev->dev, "NOP: status %#x\n", op->status);
		ret = -EIO;
	} else if (!ret && op->out_written != sizeof(__le64)) {
		dev_warn_ratelimited(&qd->vdev->dev, "NOP: reply of %u bytes\n",
				     op->out_written);
		ret = -EPROTO;
	} else if (!ret) {
		a.queue = (u32)op->value;
		a.cookie = le64_to_cpu(*(__le64 *)op->out);
		ret = copy_to_user(arg, &a, sizeof(a)) ? -EFAULT : 0;
	}
	qcuda_op_put(op);
	return ret;
}

static long qcuda_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct qcuda_file *qf = f->private_data;
	struct qcuda_dev *qd = qf->qd;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case QCUDA_IOC_INFO: {
		struct qcuda_info info = {
			.num_queues = qd->num_queues,
			.queue_size = qd->queue_size,
			.capabilities = qd->capabilities,
			.proto_version = qd->proto_version,
			.session = READ_ONCE(qf->session),
		};

		down_read(&qd->vq_sem);
		if (!qd->dead)
			info.vring_size = virtqueue_get_vring_size(qd->queues[0].vq);
		up_read(&qd->vq_sem);
		return copy_to_user(argp, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case QCUDA_IOC_NOP:
		return qcuda_ioctl_nop(qf, argp);
	case QCUDA_IOC_CALL:
		return qcuda_ioctl_call(qf, argp);
	case QCUDA_IOC_HOST_ALLOC:
		return qcuda_ioctl_host_alloc(qf, argp);
	case QCUDA_IOC_HOST_FREE: {
		struct qcuda_host_free a;

		if (copy_from_user(&a, argp, sizeof(a)))
			return -EFAULT;
		return qcuda_hostmem_remove(qf, a.mmap_offset, false);
	}
	case QCUDA_IOC_HOST_REGISTER:
		return qcuda_ioctl_host_register(qf, argp);
	case QCUDA_IOC_HOST_UNREGISTER: {
		struct qcuda_host_unregister a;

		if (copy_from_user(&a, argp, sizeof(a)))
			return -EFAULT;
		return qcuda_hostmem_remove(qf, a.addr, true);
	}
	case QCUDA_IOC_GPA:
		return qcuda_ioctl_gpa(f, argp);
	default:
		return -ENOTTY;
	}
}

/* ---- files and sessions ---- */

static void qcuda_file_free(struct qcuda_file *qf)
{
	struct qcuda_hostmem *hm, *th;
	struct qcuda_map *m, *tm;

	list_for_each_entry_safe(m, tm, &qf->maps, node)
		kfree(m);
	list_for_each_entry_safe(hm, th, &qf->hostmem, node) {
		list_del(&hm->node);
		hm->live = false;
		qcuda_hostmem_put(hm);
	}
	kref_put(&qf->qd->kref, qcuda_release_dev);
	kfree(qf);
}

/*
 * Send SESSION_CLOSE for session (the backend answers the session's
 * requests still in the device and frees what it held). The op holds a
 * reference to qf, so the file and its host memory, which the device may
 * use until then, stay until it has come back. It takes its request slot at
 * once and waits for ring room until there is some or the device is gone.
 * wait: from release; wait (killably) for the reply, so that when close()
 * or exit returns the session's resources are free on the host.
 */
static void qcuda_session_close(struct qcuda_file *qf, u64 session, bool wait)
{
	struct qcuda_op *op;
	int err;
	u32 qi;

	op = qcuda_op_alloc(qf, QCUDA_CMD_SESSION_CLOSE, 0, 0, QCUDA_DATA_NONE, 0, 0);
	if (!op) {
		dev_warn(&qf->qd->vdev->dev, "cannot close session %llx: no memory\n",
			 session);
		return;
	}
	op->session = session;
	qi = (u32)atomic_inc_return(&qf->qd->next_queue) % qf->qd->num_queues;
	err = qcuda_chunk_start(op, &op->slot[0], 0, qi, false);
	/* If killed meanwhile, the reply alone frees the op (and the file). */
	if (!err && wait)
		wait_for_completion_killable(&op->slot[0].done);
	qcuda_op_put(op);
}

/* The last reference (the file is released and every request of it has
 * come back) frees qf. */
static void qcuda_file_put(struct qcuda_file *qf)
{
	if (refcount_dec_and_test(&qf->ref))
		qcuda_file_free(qf);
}

/*
 * Record a session opened by SESSION_OPEN. If the file has one already (a
 * killed opener's reply came back after another caller opened one), or was
 * released meanwhile (the opener was killed, then the process exited),
 * close this one now: release() closes only the session it found.
 */
static void qcuda_session_set(struct qcuda_file *qf, u64 session)
{
	bool keep;

	mutex_lock(&qf->lock);
	keep = !qf->session && !qf->released;
	if (keep)
		WRITE_ONCE(qf->session, session);
	mutex_unlock(&qf->lock);
	if (keep) {
		dev_dbg(&qf->qd->vdev->dev, "session %llx opened\n", session);
		return;
	}
	dev_dbg(&qf->qd->vdev->dev, "closing extra session %llx\n", session);
	qcuda_session_close(qf, session, false);
}

/*
 * The session is opened by the file's first CALL, not in open(): misc_open()
 * calls qcuda_open() under the misc core's global mutex, which must not be
 * held across a round trip. Concurrent first callers wait (killably).
 */
static int qcuda_session_open(struct qcuda_file *qf)
{
	struct qcuda_op *op;
	int err;

	if (READ_ONCE(qf->session))
		return 0;
	if (mutex_lock_killable(&qf->open_lock))
		return -EINTR;
	err = 0;
	if (READ_ONCE(qf->session))
		goto out;
	op = qcuda_op_alloc(qf, QCUDA_CMD_SESSION_OPEN, 0, 0, QCUDA_DATA_NONE, 0, 0);
	if (!op) {
		err = -ENOMEM;
		goto out;
	}
	err = qcuda_op_run(op, QCUDA_QUEUE_ANY);
	if (!err && qcuda_st_err(op->status)) {
		dev_dbg(&qf->qd->vdev->dev, "SESSION_OPEN: status %#x\n", op->status);
		err = -EIO;
	} else if (!err && !op->value) {
		err = -EPROTO;
	} else if (!err) {
		qcuda_session_set(qf, op->value);
	}
	/* If killed, the reply may still open a session: then the op's
	 * last reference hands it to the file (qcuda_op_free). */
	qcuda_op_put(op);
out:
	mutex_unlock(&qf->open_lock);
	return err;
}

static int qcuda_open(struct inode *inode, struct file *f)
{
	/* misc_open() set private_data to our miscdevice. */
	struct qcuda_dev *qd = container_of(f->private_data, struct qcuda_dev, misc);
	struct qcuda_file *qf;

	qf = kzalloc(sizeof(*qf), GFP_KERNEL);
	if (!qf)
		return -ENOMEM;
	kref_get(&qd->kref);
	qf->qd = qd;
	refcount_set(&qf->ref, 1);
	atomic_set(&qf->inflight, 0);
	init_waitqueue_head(&qf->slot_wq);
	mutex_init(&qf->open_lock);
	mutex_init(&qf->lock);
	INIT_LIST_HEAD(&qf->hostmem);
	INIT_LIST_HEAD(&qf->maps);
	f->private_data = qf;
	return 0;
}

/*
 * The last file reference is gone, so no ioctl runs on qf and none will;
 * requests of killed callers may still be in the device. Close the session
 * now all the same (they come back answered); the ops' references keep the
 * file until the last of them has returned.
 */
static int qcuda_release(struct inode *inode, struct file *f)
{
	struct qcuda_file *qf = f->private_data;
	u64 session;

	mutex_lock(&qf->lock);
	qf->released = true;
	session = qf->session;
	mutex_unlock(&qf->lock);
	if (session) {
		dev_dbg(&qf->qd->vdev->dev, "closing session %llx (%d requests in flight)\n",
			session, atomic_read(&qf->inflight));
		qcuda_session_close(qf, session, true);
	}
	qcuda_file_put(qf);
	return 0;
}

static const struct file_operations qcuda_fops = {
	.owner = THIS_MODULE,
	.open = qcuda_open,
	.release = qcuda_release,
	.unlocked_ioctl = qcuda_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = qcuda_mmap,
	.llseek = noop_llseek,
};

/* ---- device ---- */

static int qcuda_read_config(struct qcuda_dev *qd)
{
	struct virtio_device *vdev = qd->vdev;
	u32 magic;

	virtio_cread_le(vdev, struct virtio_qcuda_config, magic, &magic);
	virtio_cread_le(vdev, struct virtio_qcuda_config, proto_version,
			&qd->proto_version);
	virtio_cread_le(vdev, struct virtio_qcuda_config, num_queues,
			&qd->num_queues);
	virtio_cread_le(vdev, struct virtio_qcuda_config, queue_size,
			&qd->queue_size);
	virtio_cread_le(vdev, struct virtio_qcuda_config, capabilities,
			&qd->capabilities);

	if (magic != QCUDA_MAGIC) {
		dev_err(&vdev->dev, "bad config magic %#x (want %#x)\n",
			magic, QCUDA_MAGIC);
		return -ENODEV;
	}
	if (qd->proto_version != QCUDA_PROTO_VERSION) {
		dev_err(&vdev->dev, "unsupported protocol version %u (want %u)\n",
			qd->proto_version, QCUDA_PROTO_VERSION);
		return -ENODEV;
	}
	if (qd->num_queues < 1 || qd->num_queues > QCUDA_MAX_QUEUES) {
		dev_err(&vdev->dev, "bad num_queues %u (1..%u)\n",
			qd->num_queues, QCUDA_MAX_QUEUES);
		return -ENODEV;
	}
	return 0;
}

static int qcuda_init_vqs(struct qcuda_dev *qd)
{
	struct virtqueue_info *info;
	struct virtqueue **vqs;
	/* Spread the queue interrupts over the CPUs; vector 0 is config. */
	struct irq_affinity desc = { .pre_vectors = 1 };
	u32 i;
	int err = -ENOMEM;

	info = kcalloc(qd->num_queues, sizeof(*info), GFP_KERNEL);
	vqs = kcalloc(qd->num_queues, sizeof(*vqs), GFP_KERNEL);
	if (!info || !vqs)
		goto out;
	for (i = 0; i < qd->num_queues; i++) {
		struct qcuda_queue *q = &qd->queues[i];

		spin_lock_init(&q->lock);
		init_waitqueue_head(&q->space_wq);
		snprintf(q->name, sizeof(q->name), "req.%u", i);
		info[i].name = q->name;
		info[i].callback = qcuda_vq_done;
	}
	err = virtio_find_vqs(qd->vdev, qd->num_queues, vqs, info, &desc);
	if (err) {
		dev_err(&qd->vdev->dev, "cannot set up %u queues: %d\n",
			qd->num_queues, err);
		goto out;
	}
	for (i = 0; i < qd->num_queues; i++)
		qd->queues[i].vq = vqs[i];
out:
	kfree(info);
	kfree(vqs);
	return err;
}

/* Requests one file may have in flight: a quarter of every ring's slots
 * (each request takes one: its chain goes indirect), at least a few. */
static int qcuda_file_slots(struct qcuda_dev *qd)
{
	unsigned int total = 0;
	u32 i;

	for (i = 0; i < qd->num_queues; i++)
		total += virtqueue_get_vring_size(qd->queues[i].vq);
	return max_t(unsigned int, total / 4, QCUDA_MIN_FILE_SLOTS);
}

static int qcuda_probe(struct virtio_device *vdev)
{
	struct qcuda_dev *qd;
	int err;

	if (!virtio_has_feature(vdev, VIRTIO_F_VERSION_1))
		return -ENODEV;
	/* A chunk is up to ~1030 descriptors: one indirect table each. */
	if (!virtio_has_feature(vdev, VIRTIO_RING_F_INDIRECT_DESC)) {
		dev_err(&vdev->dev, "device lacks RING_INDIRECT_DESC\n");
		return -ENODEV;
	}
	if (!vdev->config->get) {
		dev_err(&vdev->dev, "config access disabled\n");
		return -EINVAL;
	}

	qd = kzalloc(sizeof(*qd), GFP_KERNEL);
	if (!qd)
		return -ENOMEM;
	kref_init(&qd->kref);
	init_rwsem(&qd->vq_sem);
	qd->vdev = vdev;
	vdev->priv = qd;

	err = qcuda_read_config(qd);
	if (err)
		goto err_free;
	qd->queues = kcalloc(qd->num_queues, sizeof(*qd->queues), GFP_KERNEL);
	if (!qd->queues) {
		err = -ENOMEM;
		goto err_free;
	}
	err = qcuda_init_vqs(qd);
	if (err)
		goto err_free;
	qd->file_slots = qcuda_file_slots(qd);

	qd->index = ida_alloc(&qcuda_ida, GFP_KERNEL);
	if (qd->index < 0) {
		err = qd->index;
		goto err_vqs;
	}
	virtio_device_ready(vdev);

	snprintf(qd->name, sizeof(qd->name), "qcuda%d", qd->index);
	qd->misc.minor = MISC_DYNAMIC_MINOR;
	qd->misc.name = qd->name;
	qd->misc.fops = &qcuda_fops;
	qd->misc.parent = &vdev->dev;
	err = misc_register(&qd->misc);
	if (err)
		goto err_reset;

	dev_info(&vdev->dev, "/dev/%s: %u queues, queue_size %u, vring %u, proto %u, caps %#llx, %d requests per file\n",
		 qd->name, qd->num_queues, qd->queue_size,
		 virtqueue_get_vring_size(qd->queues[0].vq), qd->proto_version,
		 qd->capabilities, qd->file_slots);
	return 0;

err_reset:
	virtio_reset_device(vdev);
	ida_free(&qcuda_ida, qd->index);
err_vqs:
	vdev->config->del_vqs(vdev);
err_free:
	vdev->priv = NULL;
	kref_put(&qd->kref, qcuda_release_dev);
	return err;
}

static void qcuda_remove(struct virtio_device *vdev)
{
	struct qcuda_dev *qd = vdev->priv;
	struct qcuda_chunk *c;
	u32 i;

	misc_deregister(&qd->misc);	/* no new opens */

	/* No new submissions; sleepers waiting for ring space wake up. */
	for (i = 0; i < qd->num_queues; i++) {
		spin_lock_irq(&qd->queues[i].lock);
		WRITE_ONCE(qd->dead, true);
		spin_unlock_irq(&qd->queues[i].lock);
	}

	/* Stop the device: after this it no longer owns any buffer, and no
	 * callback runs. Fail everything still queued. */
	virtio_reset_device(vdev);
	for (i = 0; i < qd->num_queues; i++) {
		struct qcuda_queue *q = &qd->queues[i];

		spin_lock_irq(&q->lock);
		while ((c = virtqueue_detach_unused_buf(q->vq)) != NULL) {
			c->error = -ENODEV;
			complete(&c->done);
			qcuda_slot_put(c->op->qf);
			qcuda_op_put_dev(c->op);
		}
		spin_unlock_irq(&q->lock);
		wake_up_all(&q->space_wq);
	}

	/* Wait for submitters still inside qcuda_submit(). */
	down_write(&qd->vq_sem);
	vdev->config->del_vqs(vdev);
	up_write(&qd->vq_sem);

	ida_free(&qcuda_ida, qd->index);
	vdev->priv = NULL;
	kref_put(&qd->kref, qcuda_release_dev);	/* open files keep qd */
}

static const struct virtio_device_id id_table[] = {
	{ VIRTIO_ID_QCUDA, VIRTIO_DEV_ANY_ID },
	{ 0 },
};

static struct virtio_driver qcuda_driver = {
	.driver.name = KBUILD_MODNAME,
	.id_table = id_table,
	.probe = qcuda_probe,
	.remove = qcuda_remove,
};

static int __init qcuda_init(void)
{
	int err;

	qcuda_wq = alloc_workqueue("qcuda", 0, 0);
	if (!qcuda_wq)
		return -ENOMEM;
	err = register_virtio_driver(&qcuda_driver);
	if (err)
		destroy_workqueue(qcuda_wq);
	return err;
}

static void __exit qcuda_exit(void)
{
	/* remove() hands every op back; then let their frees run. */
	unregister_virtio_driver(&qcuda_driver);
	destroy_workqueue(qcuda_wq);
}

module_init(qcuda_init);
module_exit(qcuda_exit);
MODULE_DEVICE_TABLE(virtio, id_table);
MODULE_DESCRIPTION("qcuda virtual CUDA device driver");
MODULE_LICENSE("GPL");
