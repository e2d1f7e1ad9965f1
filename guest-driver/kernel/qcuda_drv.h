/* SPDX-License-Identifier: GPL-2.0-only */
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
 * Files: qcuda_main.c (module init, probe/remove, config space),
 * qcuda_vq.c (operations: chunks, requests on the virtqueues, reaping),
 * qcuda_hostmem.c (HOST_ALLOC/HOST_REGISTER memory, mmap, GPA, HOST_MAP),
 * qcuda_ioctl.c (the ioctl entry point, CALL and NOP), qcuda_file.c (open
 * and release, backend sessions), qcuda_proc.c (what the files of one
 * process share: request slots, a queue of its own, transfer pins). This
 * header holds what they share.
 *
 * Operations and chunks: every round trip is a struct qcuda_op (a driver
 * command or a QCUDA_IOC_CALL), split into chunks of at most QCUDA_CHUNK
 * data bytes, one request each. The data is user memory, pinned chunk by
 * chunk (inside a mapping of the file's HOST_ALLOC memory: a reference on
 * the allocation instead) and passed as a scatterlist (physically contiguous
 * pages coalesced) through an indirect descriptor table (if that table
 * cannot be allocated, the call fails with -ENOMEM). Chunks are
 * submitted to the file's own queue (below), or else to queue 0 (round
 * robin over the queues with own_queues off), and waited for only when
 * QCUDA_WINDOW of them are in flight, so a transfer of up to QCUDA_WINDOW
 * chunks is submitted whole before the first wait, and a larger one streams
 * through the window.
 *
 * Own queues: a file opening its session takes a free queue of 1..
 * num_queues-1 for its own (qcuda_queue_claim(); queue 0 stays everyone's),
 * if its process owns none yet (one a process: else one process with a few
 * files would take them all), and says so in SESSION_OPEN (QCUDA_SESSION_OWN_QUEUE): from then on every
 * request of the session, whatever thread sends it, chunks and SESSION_CLOSE
 * included, goes on that queue and no other session's does, so the backend
 * may hand the queue to the session's worker process (a synchronous call
 * then skips a hop through the backend). The queue is free again once the
 * SESSION_CLOSE is answered (or the device is gone), or at once if the
 * SESSION_OPEN opened nothing. A file that finds no queue free (or a device
 * of one queue) opens its session without the flag and keeps to queue 0, so
 * that a queue claimed later holds nothing of its.
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
 * Bounds: the files a process opened (struct qcuda_proc, by thread group)
 * share one bound: at most proc_slots requests in the device together (a
 * quarter of all ring slots, at least QCUDA_MIN_FILE_SLOTS), so that one
 * process whose calls wait in the backend (behind a host function that
 * never returns, say) cannot take every ring slot of the VM, however many
 * files it opens; a file with a queue of its own also at most that ring
 * less QCUDA_OWN_RESERVE. More callers wait (killably) for a slot, as
 * threads wait natively. SESSION_CLOSE and CALLBACK_WAIT do not wait: the
 * first must go out, and the second is what lets calls parked behind a host
 * function go on (the backend parks at most a few per session and answers
 * the rest at once). A shared queue (one no session owns: queue 0, or every
 * queue with own_queues off) keeps its last eighth (q->reserve) for
 * SESSION_OPEN, SESSION_CLOSE and NOP, which the backend answers at once,
 * and for the first QCUDA_RESERVE_SHARE requests (and QCUDA_RESERVE_WAITS
 * CALLBACK_WAITs) of each process there: several processes together can
 * fill a shared queue up to it, but a new process can still open its
 * session and make its calls.
 * Pinning: HOST_REGISTER pins (FOLL_LONGTERM) and HOST_ALLOC pages last
 * until freed, so they count in the caller's pinned_vm (VmPin) against
 * RLIMIT_MEMLOCK (-ENOMEM past it, unless CAP_IPC_LOCK), as RDMA
 * registrations do. A transfer pins its pages only while its requests are
 * in the device, but a request may wait there for as long as the program
 * likes (behind a host function): the pages of every process's transfers
 * count against transfer_pin_mib (qcuda_proc.c); past it a chunk waits
 * (killably) until some are unpinned, its call's own chunks in flight first
 * reaped. One chunk always goes when the process has nothing pinned.
 *
 * Concurrency: a request holds its queue's spinlock only while it is added
 * and the kick is prepared; callers then sleep on the chunk's completion,
 * which the queue's interrupt callback signals. No lock is held across a
 * round trip. Waits are killable: only a fatal signal interrupts a call.
 */
#ifndef QCUDA_DRV_H
#define QCUDA_DRV_H

#include <linux/atomic.h>
#include <linux/cache.h>
#include <linux/completion.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/rwsem.h>
#include <linux/scatterlist.h>
#include <linux/sizes.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/virtio.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "qcuda_proto.h"
#include "qcuda_ioctl.h"

#define QCUDA_MAX_QUEUES 64
/* The fewest requests a file may have in flight, however small the rings. */
#define QCUDA_MIN_FILE_SLOTS 4
/* Requests (other than SESSION_OPEN, SESSION_CLOSE and NOP) one process
 * may have in the reserve of the shared queues, and CALLBACK_WAITs besides:
 * a process with many calls waiting still gets its callback thread's wait
 * in, and one process takes only a few entries of the reserve.
 */
#define QCUDA_RESERVE_SHARE 4
#define QCUDA_RESERVE_WAITS 2
/* Ring entries a session's own queue keeps free of its file's ordinary
 * requests: for the CALLBACK_WAITs the backend parks (a few: 8 today) and
 * the SESSION_CLOSE, which take no request slot and must find room in that
 * ring even while all the file's other requests wait in the backend.
 */
#define QCUDA_OWN_RESERVE 16
/* Chunks of one op in flight at once (16 x 16 MiB = 256 MiB): bounds what
 * one call pins and allocates, not the size of a transfer.
 */
#define QCUDA_WINDOW (SZ_256M / QCUDA_CHUNK)
/* Pages one chunk can touch (an unaligned chunk straddles one more): 4097.
 * So the chain of a chunk of scattered pages has up to 4101 descriptors
 * (header, arguments, data, response, output), more than a ring holds: it
 * can only go indirect, in a table that virtio_ring kmallocs atomically
 * (4101 x 16 bytes, just over 64 KiB: an order-5 allocation). See
 * qcuda_indirect_room().
 */
#define QCUDA_CHUNK_PAGES (QCUDA_CHUNK / PAGE_SIZE + 1)
/* Pages a chunk pins without allocating: a short call's data (a batch of
 * posted work, a small pageable copy) takes a few. The array for a whole
 * chunk is 32 KiB and more (an order-4 allocation, or vmalloc where that
 * fails): allocated and freed on every call, it took a launch +
 * synchronize in a TCG guest from 100-126 us to 197-220 us.
 */
#define QCUDA_FEW_PAGES 8
/* Retries, a tick apart (a second in all), of a chunk that can only go
 * indirect, before the call fails with -ENOMEM.
 */
#define QCUDA_INDIRECT_TRIES HZ

struct qcuda_queue {
	struct virtqueue *vq;
	spinlock_t lock;		/* serializes add/kick/get_buf on vq */
	bool owned;			/* a session's own queue; under lock */
	unsigned int reserve;		/* entries kept while shared (see Bounds) */
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
	 * takes it for writing before deleting the virtqueues.
	 */
	struct rw_semaphore vq_sem;
	bool dead;			/* set under every queue lock */

	u32 num_queues;
	u32 queue_size;
	int proc_slots;			/* requests one process may have in flight */
	int own_slots;			/* one file with a queue of its own; 0:
					 * rings too small to own one
					 */
	struct mutex procs_lock;	/* procs */
	struct list_head procs;		/* processes with open files */
	u32 proto_version;
	u64 capabilities;
	atomic_t next_queue;		/* round robin */
	struct qcuda_queue *queues;
};

/*
 * A process (thread group) with open files of the device, known by the
 * process that opened them: what its files share. Lives while it has files.
 */
struct qcuda_proc {
	struct list_head node;		/* in qd->procs */
	struct pid *tgid;		/* referenced */
	unsigned int files;		/* under qd->procs_lock */
	atomic_t inflight;		/* requests of its files in the device */
	wait_queue_head_t slot_wq;	/* callers waiting for inflight < proc_slots */
	atomic_t reserved;		/* of those, in a shared queue's reserve */
	atomic_t reserved_waits;	/* the same, CALLBACK_WAITs */
	atomic_t owns;			/* 1 while one of its files has claimed a queue */
	atomic64_t pinned;		/* bytes its transfers hold pinned */
	wait_queue_head_t pin_wq;	/* chunks waiting for pinned to go down */
};

/* An open file: one backend session and the host memory it owns. */
struct qcuda_file {
	struct qcuda_dev *qd;
	struct qcuda_proc *proc;	/* the process that opened it */
	/* The open file + one per op; at zero the file is freed. */
	refcount_t ref;
	u64 session;			/* 0 until the first CALL opened it */
	u32 queue;			/* the session's own queue, or
					 * QCUDA_QUEUE_ANY; set before session
					 */
	int slots;			/* requests it may have in the device (its
					 * process's bound too)
					 */
	bool released;			/* release() ran; under lock */
	atomic_t inflight;		/* requests in the device */
	wait_queue_head_t slot_wq;	/* callers waiting for inflight < slots */
	struct mutex open_lock;		/* one SESSION_OPEN at a time */
	struct mutex lock;		/* hostmem, maps, next_token, session
					 * changes, released
					 */
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
					 * under qf->lock
					 */
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
 * apart from everything the CPU writes while the device owns it.
 */
struct qcuda_chunk {
	struct qcuda_op *op;
	struct completion done;
	struct qcuda_queue *q;		/* the queue it went to (polled for its answer) */
	int error;			/* -ENODEV if reclaimed by remove() */
	unsigned int used_len;		/* bytes the device wrote */
	bool busy;			/* submitted, not yet reaped */
	atomic_t *reserve;		/* the process's count it took to go into a
					 * shared queue's reserve, or NULL
					 */
	u64 len;			/* data bytes */
	u64 pinned;			/* bytes counted in the process's pinned */
	unsigned int npages;		/* pinned pages, 0 if none */
	struct qcuda_hostmem *hm;	/* or the data lies in this HOST_ALLOC
					 * (referenced), nothing pinned
					 */
	struct page **pages;		/* the pinned pages: `few` or `many` */
	struct page **many;		/* QCUDA_CHUNK_PAGES, allocated on first
					 * use by a chunk of more than QCUDA_FEW_PAGES
					 */
	struct page *few[QCUDA_FEW_PAGES];
	struct sg_table sgt;		/* the data */
	void *out;			/* output room of chunks > 0 (never read) */
	struct scatterlist sg_hdr, sg_args, sg_resp, sg_out;
	struct qcuda_req_hdr hdr;
	struct qcuda_resp_hdr resp ____cacheline_aligned;
};

/* One round trip, in chunks. Results are folded in as chunks are reaped
 * (in chunk order): status = the first failing one, with QCUDA_ST_OUTPUT
 * (a flag, not a failure) OR-ed in from any chunk; value and out from
 * chunk 0.
 */
struct qcuda_op {
	refcount_t ref;			/* the caller + one per chunk in the device */
	struct qcuda_file *qf;		/* holds a reference */
	struct work_struct free_work;
	u32 cmd, args_len, out_len, dir;
	u64 session;
	u32 queue;			/* every chunk goes there (the session's
					 * own queue), or QCUDA_QUEUE_ANY
					 */
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

/* qcuda_main.c */
/* Frees ops whose last reference the device dropped (in interrupt context). */
extern struct workqueue_struct *qcuda_wq;
void qcuda_release_dev(struct kref *kref);

/* qcuda_vq.c */
struct qcuda_op *qcuda_op_alloc(struct qcuda_file *qf, u32 cmd,
				u32 args_len, u32 out_len, u32 dir,
				u64 data, u64 data_len);
void qcuda_op_put(struct qcuda_op *op);
void qcuda_op_put_dev(struct qcuda_op *op);
void qcuda_vq_done(struct virtqueue *vq);
u32 qcuda_next_queue(struct qcuda_dev *qd);
u32 qcuda_queue_claim(struct qcuda_file *qf);
void qcuda_queue_release(struct qcuda_file *qf, u32 qi);
int qcuda_chunk_start(struct qcuda_op *op, struct qcuda_chunk *c,
		      u64 i, u32 qi, bool killable, bool reap_first);
int qcuda_op_run(struct qcuda_op *op, u32 queue);

/* qcuda_proc.c */
struct qcuda_proc *qcuda_proc_get(struct qcuda_dev *qd);
void qcuda_proc_put(struct qcuda_dev *qd, struct qcuda_proc *p);
int qcuda_slot_get(struct qcuda_op *op);
void qcuda_slot_put(struct qcuda_file *qf);
bool qcuda_reserve_take(struct qcuda_queue *q, struct qcuda_chunk *c);
bool qcuda_reserve_open(struct qcuda_queue *q, struct qcuda_chunk *c);
void qcuda_reserve_put(struct qcuda_dev *qd, struct qcuda_chunk *c);
int qcuda_pin_get(struct qcuda_proc *p, u64 bytes, bool reap_first);
void qcuda_pin_put(struct qcuda_proc *p, u64 bytes);

/* qcuda_hostmem.c */
void qcuda_hostmem_put(struct qcuda_hostmem *hm);
int qcuda_hostmem_remove(struct qcuda_file *qf, u64 key, bool registered);
struct page **qcuda_chunk_hold(struct qcuda_op *op, struct qcuda_chunk *c,
			       unsigned long start, unsigned int n);
long qcuda_ioctl_host_alloc(struct qcuda_file *qf,
			    struct qcuda_host_alloc __user *uarg);
long qcuda_ioctl_host_register(struct qcuda_file *qf,
			       struct qcuda_host_register __user *uarg);
long qcuda_ioctl_gpa(struct file *f, struct qcuda_gpa __user *uarg);
int qcuda_mmap(struct file *f, struct vm_area_struct *vma);
int qcuda_map_begin(struct qcuda_file *qf, struct qcuda_op *op,
		    struct qcuda_hostmem **mapped);
int qcuda_map_pages_begin(struct qcuda_file *qf, struct qcuda_op *op,
			  struct qcuda_hostmem **mapped);
void qcuda_map_end(struct qcuda_file *qf, struct qcuda_hostmem *hm,
		   int err, struct qcuda_op *op);
void qcuda_unmap(struct qcuda_file *qf, bool all, u64 devptr);

/* qcuda_ioctl.c */
long qcuda_ioctl(struct file *f, unsigned int cmd, unsigned long arg);

/* qcuda_file.c */
extern const struct file_operations qcuda_fops;
void qcuda_file_put(struct qcuda_file *qf);
void qcuda_session_set(struct qcuda_file *qf, u64 session, u32 queue);
int qcuda_session_open(struct qcuda_file *qf);

#endif /* QCUDA_DRV_H */
