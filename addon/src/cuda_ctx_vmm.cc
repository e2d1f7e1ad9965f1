// CudaContext's virtual memory management: address reservations, physical
// memory (pinned, on the context's device), mappings and their access, each
// one driver call. The backend checked every argument against the session's
// table (backend/src/qcuda/vmm/vmm.ts) and runs one call per mapping; this keeps
// what it made so that the context's teardown frees it (such memory is the
// device's, not the context's: destroying the context would leave it).
#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {

// vmmReserve(size, alignment, hint) -> the range's start
QCUDA_CONTEXT_METHOD(vmmReserve, ctx, info) {
  uint64_t size = ArgU64(info[0], "size");
  uint64_t alignment = ArgU64(info[1], "alignment");
  uint64_t hint = ArgU64(info[2], "hint");
  return ctx.Submit(info, Where::kContextThread, [size, alignment, hint](Job &job) -> res::Big {
    if (!Have(job, cu::api().MemAddressReserve, "cuMemAddressReserve")) return {};
    cu::Ptr p = 0;
    if (!job.Check(cu::api().MemAddressReserve(&p, size, alignment, hint, 0), "cuMemAddressReserve")) return {};
    job.ctx->vmmRanges[p] = size;
    return {p};
  });
}

// vmmFree(ptr, size)
QCUDA_CONTEXT_METHOD(vmmFree, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  uint64_t size = ArgU64(info[1], "size");
  return ctx.Submit(info, Where::kContextThread, [ptr, size](Job &job) {
    auto &ranges = job.ctx->vmmRanges;
    auto it = ranges.find(ptr);
    if (it == ranges.end() || it->second != size)
      return job.Fail(cu::kInvalidValue, "qcuda: vmmFree: no such reservation");
    if (!Have(job, cu::api().MemAddressFree, "cuMemAddressFree")) return;
    if (job.Check(cu::api().MemAddressFree(ptr, size), "cuMemAddressFree")) ranges.erase(it);
  });
}

// vmmCreate(size) -> the allocation's id
QCUDA_CONTEXT_METHOD(vmmCreate, ctx, info) {
  uint64_t size = ArgU64(info[0], "size");
  return ctx.Submit(info, Where::kContextThread, [size](Job &job) -> res::Num {
    if (!Have(job, cu::api().MemCreate, "cuMemCreate")) return {};
    cu::MemAllocationProp prop{};
    prop.type = cu::kMemAllocationTypePinned;
    prop.location = {cu::kMemLocationTypeDevice, job.ctx->ordinal};
    // Every allocation may be exported as a POSIX fd (vmmExport): cuMemCreate's
    // wire args (size, flags) do not carry the guest's requestedHandleTypes,
    // and the guest exports one later (cuMemExportToShareableHandle) only if
    // the driver was asked for that handle type at creation. On Linux it is
    // a flag the driver keeps; nothing is made until the export. Where the
    // driver refuses the handle type (not for want of memory), the
    // allocation is made without it and its export fails then, not this.
    prop.requestedHandleTypes = cu::kMemHandleTypePosixFd;
    cu::MemHandle h = 0;
    cu::Result r = cu::api().MemCreate(&h, size, &prop, 0);
    if (r != 0 && r != cu::kOutOfMemory) {
      prop.requestedHandleTypes = 0;
      r = cu::api().MemCreate(&h, size, &prop, 0);
    }
    if (!job.Check(r, "cuMemCreate")) return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->vmmAllocs[id] = h;
    return {static_cast<double>(id)};
  });
}

// vmmRelease(id): once nothing maps it (the backend's count)
QCUDA_CONTEXT_METHOD(vmmRelease, ctx, info) {
  uint32_t id = ArgId(info[0], "allocation");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) {
    auto &allocs = job.ctx->vmmAllocs;
    auto it = allocs.find(id);
    if (it == allocs.end()) return job.Fail(cu::kInvalidValue, "qcuda: vmmRelease: no such allocation");
    if (!Have(job, cu::api().MemRelease, "cuMemRelease")) return;
    cu::MemHandle h = it->second;
    allocs.erase(it);
    job.Check(cu::api().MemRelease(h), "cuMemRelease");
  });
}

// vmmExport(id) -> a POSIX fd of the allocation (cuMemExportToShareableHandle),
// the caller's to close: it goes to another session's worker, which imports
// it (vmmImport). The export holds nothing here: the fd holds the memory.
QCUDA_CONTEXT_METHOD(vmmExport, ctx, info) {
  uint32_t id = ArgId(info[0], "allocation");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) -> res::Num {
    auto it = job.ctx->vmmAllocs.find(id);
    if (it == job.ctx->vmmAllocs.end()) {
      job.Fail(cu::kInvalidValue, "qcuda: vmmExport: no such allocation");
      return {};
    }
    if (!Have(job, cu::api().MemExportToShareableHandle, "cuMemExportToShareableHandle")) return {};
    int fd = -1;
    if (!job.Check(cu::api().MemExportToShareableHandle(&fd, it->second, cu::kMemHandleTypePosixFd, 0),
                   "cuMemExportToShareableHandle"))
      return {};
    return {static_cast<double>(fd)};
  });
}

// vmmImport(fd) -> the allocation's id here (cuMemImportFromShareableHandle):
// the same memory as the exporter's, released by vmmRelease as one made here.
// The fd stays the caller's (the driver takes what it needs of it).
QCUDA_CONTEXT_METHOD(vmmImport, ctx, info) {
  int32_t fd = ArgI32(info[0], "fd");
  return ctx.Submit(info, Where::kContextThread, [fd](Job &job) -> res::Num {
    if (fd < 0) {
      job.Fail(cu::kInvalidValue, "qcuda: vmmImport: not an fd");
      return {};
    }
    if (!Have(job, cu::api().MemImportFromShareableHandle, "cuMemImportFromShareableHandle")) return {};
    cu::MemHandle h = 0;
    void *os = reinterpret_cast<void *>(static_cast<uintptr_t>(fd));
    if (!job.Check(cu::api().MemImportFromShareableHandle(&h, os, cu::kMemHandleTypePosixFd),
                   "cuMemImportFromShareableHandle"))
      return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->vmmAllocs[id] = h;
    return {static_cast<double>(id)};
  });
}

// vmmMap(ptr, size, id): size bytes of the allocation, from its start, at ptr
QCUDA_CONTEXT_METHOD(vmmMap, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  uint64_t size = ArgU64(info[1], "size");
  uint32_t id = ArgId(info[2], "allocation");
  return ctx.Submit(info, Where::kContextThread, [ptr, size, id](Job &job) {
    auto it = job.ctx->vmmAllocs.find(id);
    if (it == job.ctx->vmmAllocs.end()) return job.Fail(cu::kInvalidValue, "qcuda: vmmMap: no such allocation");
    if (!Have(job, cu::api().MemMap, "cuMemMap")) return;
    if (job.Check(cu::api().MemMap(ptr, size, 0, it->second, 0), "cuMemMap")) job.ctx->vmmMaps[ptr] = size;
  });
}

// vmmUnmap(ptr, size): one whole mapping
QCUDA_CONTEXT_METHOD(vmmUnmap, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  uint64_t size = ArgU64(info[1], "size");
  return ctx.Submit(info, Where::kContextThread, [ptr, size](Job &job) {
    auto &maps = job.ctx->vmmMaps;
    auto it = maps.find(ptr);
    if (it == maps.end() || it->second != size) return job.Fail(cu::kInvalidValue, "qcuda: vmmUnmap: no such mapping");
    if (!Have(job, cu::api().MemUnmap, "cuMemUnmap")) return;
    if (job.Check(cu::api().MemUnmap(ptr, size), "cuMemUnmap")) maps.erase(it);
  });
}

// vmmSetAccess(ptr, size): read-write for the context's device
QCUDA_CONTEXT_METHOD(vmmSetAccess, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  uint64_t size = ArgU64(info[1], "size");
  return ctx.Submit(info, Where::kContextThread, [ptr, size](Job &job) {
    if (!Have(job, cu::api().MemSetAccess, "cuMemSetAccess")) return;
    cu::MemAccessDesc d{{cu::kMemLocationTypeDevice, job.ctx->ordinal}, cu::kMemAccessReadWrite};
    job.Check(cu::api().MemSetAccess(ptr, size, &d, 1), "cuMemSetAccess");
  });
}

void CtxCore::FreeVmm() {
  const cu::Api &a = cu::api();
  // In this order: a reservation is freed once nothing is mapped in it.
  if (a.MemUnmap)
    for (auto &m : vmmMaps) a.MemUnmap(m.first, m.second);
  vmmMaps.clear();
  if (a.MemRelease)
    for (auto &h : vmmAllocs) a.MemRelease(h.second);
  vmmAllocs.clear();
  if (a.MemAddressFree)
    for (auto &r : vmmRanges) a.MemAddressFree(r.first, r.second);
  vmmRanges.clear();
}

}  // namespace qcuda::cuda
