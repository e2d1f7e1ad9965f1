// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: host memory. HOST_ALLOC (the driver's pages, mmap'ed by the
 * caller) and HOST_REGISTER (pinned user pages), their pinned_vm
 * accounting, GPA, the pages a transfer takes from a HOST_ALLOC mapping
 * without GUP, and the holds HOST_MAP keeps on them. See qcuda_drv.h.
 */
#include <linux/capability.h>
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "qcuda_drv.h"

static const struct vm_operations_struct qcuda_vm_ops;

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

void qcuda_hostmem_put(struct qcuda_hostmem *hm)
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
 * holds address key), or 0 if its pages are not contiguous.
 */
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
int qcuda_hostmem_remove(struct qcuda_file *qf, u64 key, bool registered)
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

long qcuda_ioctl_host_alloc(struct qcuda_file *qf,
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

long qcuda_ioctl_host_register(struct qcuda_file *qf,
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

long qcuda_ioctl_gpa(struct file *f, struct qcuda_gpa __user *uarg)
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
 * reference to the allocation (its pages outlive HOST_FREE until unmapped).
 */
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

int qcuda_mmap(struct file *f, struct vm_area_struct *vma)
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
struct page **qcuda_chunk_hold(struct qcuda_op *op, struct qcuda_chunk *c,
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
	 * mmap lock.
	 */
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

/*
 * HOST_MAP hands guest-physical memory to the GPU, and the backend cannot
 * tell whose memory it is: only physically contiguous pages of this file's
 * own live host memory may be named. That memory then stays (HOST_FREE and
 * HOST_UNREGISTER answer EBUSY) until the mapping is undone.
 */
int qcuda_map_begin(struct qcuda_file *qf, struct qcuda_op *op,
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

/*
 * HOST_MAP_PAGES: the library names a page-aligned range of one of its own
 * HOST_ALLOC or HOST_REGISTER areas by address (key); the request that goes
 * out names its pages instead, as extents of physically consecutive pages,
 * built here from the pages this file holds (the library cannot name pages
 * that are not its own). Holds hm like HOST_MAP; -E2BIG if the pages are too
 * scattered for QCUDA_MAX_EXTENTS.
 */
int qcuda_map_pages_begin(struct qcuda_file *qf, struct qcuda_op *op,
			  struct qcuda_hostmem **mapped)
{
	const struct qcuda_args_host_map_pages *a = op->args;
	struct qcuda_args_host_map_pages *out;
	struct qcuda_extent *ext;
	struct qcuda_hostmem *hm, *found = NULL;
	unsigned long first = 0, n, i;
	u32 count = 0;
	u64 key, size;

	if (op->args_len != sizeof(*a))
		return -EINVAL;
	key = le64_to_cpu(a->key);
	size = le64_to_cpu(a->size);
	if (!size || !PAGE_ALIGNED(key) || !PAGE_ALIGNED(size) || key + size < key)
		return -EINVAL;
	n = size >> PAGE_SHIFT;
	out = kzalloc(sizeof(*out) + QCUDA_MAX_EXTENTS * sizeof(*ext), GFP_KERNEL);
	if (!out)
		return -ENOMEM;
	ext = (struct qcuda_extent *)(out + 1);

	mutex_lock(&qf->lock);
	list_for_each_entry(hm, &qf->hostmem, node) {
		/* A registered area's key may be mid-page; its pages start at that page. */
		if (key >= (hm->key & PAGE_MASK) &&
		    (key >> PAGE_SHIFT) - (hm->key >> PAGE_SHIFT) + n <= hm->npages) {
			found = hm;
			first = (key >> PAGE_SHIFT) - (hm->key >> PAGE_SHIFT);
			break;
		}
	}
	for (i = 0; found && i < n; i++) {
		phys_addr_t pa = page_to_phys(found->pages[first + i]);

		if (count && le64_to_cpu(ext[count - 1].gpa) + le64_to_cpu(ext[count - 1].len) == pa) {
			le64_add_cpu(&ext[count - 1].len, PAGE_SIZE);
			continue;
		}
		if (count == QCUDA_MAX_EXTENTS) {
			found = NULL;
			count = U32_MAX;
			break;
		}
		ext[count].gpa = cpu_to_le64(pa);
		ext[count].len = cpu_to_le64(PAGE_SIZE);
		count++;
	}
	if (found)
		found->maps++;
	mutex_unlock(&qf->lock);
	if (!found) {
		kfree(out);
		return count == U32_MAX ? -E2BIG : -EINVAL;
	}
	out->size = cpu_to_le64(size);
	out->count = cpu_to_le32(count);
	kfree(op->args);
	op->args = out;
	op->args_len = sizeof(*out) + count * sizeof(*ext);
	*mapped = found;
	return 0;
}

/* After the HOST_MAP round trip: record the device pointer, or (if it
 * surely failed) drop the hold.
 */
void qcuda_map_end(struct qcuda_file *qf, struct qcuda_hostmem *hm,
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
void qcuda_unmap(struct qcuda_file *qf, bool all, u64 devptr)
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
