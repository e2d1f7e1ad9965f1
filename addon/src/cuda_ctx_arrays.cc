// CudaContext's array calls: CUDA arrays (cuArray3DCreate), 2D/3D copies
// between linear memory, arrays and guest RAM (cuMemcpy3DAsync), pitched
// memsets, texture and surface objects. The dispatcher
// (backend/src/qcuda/commands/array.ts) has checked every extent against the
// session's allocations and arrays; the checks here keep the addon safe on
// its own (a host side never reaches outside the call's staging buffer).
//
// Guest RAM reaches a copy as a list of segments (the chunk's pages, rarely
// contiguous), while cuMemcpy3D wants one host box: the chunk goes through a
// staging buffer of its length (gathered before, scattered after), and each
// block of it is one cuMemcpy3DAsync.
#include <cstring>
#include <memory>

#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

// One copy record (u64 each): src kind, src, src pitch, src rows, src x, y, z,
// then the same for dst, then width (bytes), height, depth. Kinds: 0 device
// pointer, 1 array id, 2 offset in the staging buffer.
constexpr size_t kRecord = 17;
constexpr uint64_t kKindDevice = 0, kKindArray = 1, kKindStaging = 2;

bool Mul(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
bool Add(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

/** Fills one side of m from a record's 7 fields; false (job failed) when it is not valid. */
bool Side(Job &job, const uint64_t *f, const uint64_t *extent, uint8_t *staging, uint64_t stagingLen, bool dst,
          cu::Memcpy3D *m) {
  const uint64_t kind = f[0], h = f[1], pitch = f[2], rows = f[3], x = f[4], y = f[5], z = f[6];
  int type = 0;
  const void *host = nullptr;
  cu::Ptr dev = 0;
  cu::Array arr = nullptr;
  if (kind == kKindDevice) {
    type = cu::kMemDevice;
    dev = h;
  } else if (kind == kKindArray) {
    auto it = job.ctx->arrays.find(static_cast<uint32_t>(h));
    if (h > UINT32_MAX || it == job.ctx->arrays.end()) {
      job.Fail(cu::kInvalidHandle, "qcuda: copy3D: no such array");
      return false;
    }
    type = cu::kMemArray;
    arr = it->second;
  } else if (kind == kKindStaging) {
    // The box (from its first byte: x, y, z must be 0) must lie inside the staging buffer.
    uint64_t a, b, c, span;
    bool ok = x == 0 && y == 0 && z == 0 && extent[0] > 0 && extent[1] > 0 && extent[2] > 0 &&
              Mul(extent[2] - 1, pitch, &a) && Mul(a, rows, &a) && Mul(extent[1] - 1, pitch, &b) && Add(a, b, &c) &&
              Add(c, extent[0], &span) && Add(span, h, &span) && span <= stagingLen && staging != nullptr;
    if (!ok) {
      job.Fail(cu::kInvalidValue, "qcuda: copy3D: a host box outside its staging buffer");
      return false;
    }
    type = cu::kMemHost;
    host = staging + h;
  } else {
    job.Fail(cu::kInvalidValue, "qcuda: copy3D: memory kind");
    return false;
  }
  if (dst) {
    m->dstMemoryType = type, m->dstHost = const_cast<void *>(host), m->dstDevice = dev, m->dstArray = arr;
    m->dstPitch = pitch, m->dstHeight = rows, m->dstXInBytes = x, m->dstY = y, m->dstZ = z;
  } else {
    m->srcMemoryType = type, m->srcHost = host, m->srcDevice = dev, m->srcArray = arr;
    m->srcPitch = pitch, m->srcHeight = rows, m->srcXInBytes = x, m->srcY = y, m->srcZ = z;
  }
  return true;
}

/** Enqueues every record on s; false once one failed. */
bool RunRecords(Job &job, const std::vector<uint64_t> &recs, uint8_t *staging, uint64_t stagingLen, cu::Stream s) {
  for (size_t i = 0; i + kRecord <= recs.size(); i += kRecord) {
    const uint64_t *r = recs.data() + i;
    cu::Memcpy3D m;
    std::memset(&m, 0, sizeof m);
    if (!Side(job, r, r + 14, staging, stagingLen, false, &m) ||
        !Side(job, r + 7, r + 14, staging, stagingLen, true, &m))
      return false;
    m.WidthInBytes = r[14], m.Height = r[15], m.Depth = r[16];
    if (!job.Check(cu::api().Memcpy3DAsync(&m, s), "cuMemcpy3DAsync_v2")) return false;
  }
  return true;
}

uint64_t SegsLength(const std::vector<Seg> &segs) {
  uint64_t n = 0;
  for (const Seg &g : segs) n += g.len;
  return n;
}

}  // namespace

// arrayCreate(width, height, depth, format, channels, flags) -> id
QCUDA_CONTEXT_METHOD(arrayCreate, ctx, info) {
  cu::Array3DDescriptor d{};
  d.Width = ArgU64(info[0], "width");
  d.Height = ArgU64(info[1], "height");
  d.Depth = ArgU64(info[2], "depth");
  d.Format = static_cast<int>(ArgU32(info[3], "format"));
  d.NumChannels = ArgU32(info[4], "channels");
  d.Flags = ArgU32(info[5], "flags");
  return ctx.Submit(info, Where::kContextThread, [d](Job &job) -> res::Num {
    if (!Have(job, cu::api().Array3DCreate, "cuArray3DCreate_v2")) return {};
    cu::Array a = nullptr;
    if (!job.Check(cu::api().Array3DCreate(&a, &d), "cuArray3DCreate_v2")) return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->arrays[id] = a;
    return {static_cast<double>(id)};
  });
}

QCUDA_CONTEXT_METHOD(arrayDestroy, ctx, info) {
  uint32_t id = ArgId(info[0], "array");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) {
    if (!Have(job, cu::api().ArrayDestroy, "cuArrayDestroy")) return;
    auto it = job.ctx->arrays.find(id);
    if (it == job.ctx->arrays.end()) return job.Fail(cu::kInvalidHandle, "qcuda: arrayDestroy: no such array");
    cu::Array a = it->second;
    job.ctx->arrays.erase(it);
    job.Check(cu::api().ArrayDestroy(a), "cuArrayDestroy");
  });
}

// mipmapCreate(width, height, depth, format, channels, flags, levels) -> id
QCUDA_CONTEXT_METHOD(mipmapCreate, ctx, info) {
  cu::Array3DDescriptor d{};
  d.Width = ArgU64(info[0], "width");
  d.Height = ArgU64(info[1], "height");
  d.Depth = ArgU64(info[2], "depth");
  d.Format = static_cast<int>(ArgU32(info[3], "format"));
  d.NumChannels = ArgU32(info[4], "channels");
  d.Flags = ArgU32(info[5], "flags");
  unsigned levels = ArgU32(info[6], "levels");
  return ctx.Submit(info, Where::kContextThread, [d, levels](Job &job) -> res::Num {
    if (!Have(job, cu::api().MipmappedArrayCreate, "cuMipmappedArrayCreate")) return {};
    cu::Mipmap m = nullptr;
    if (!job.Check(cu::api().MipmappedArrayCreate(&m, &d, levels), "cuMipmappedArrayCreate")) return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->mipmaps[id] = CtxCore::Mip{m, {}};
    return {static_cast<double>(id)};
  });
}

// mipmapLevel(id, level) -> the level's array id (the same one for the same level)
QCUDA_CONTEXT_METHOD(mipmapLevel, ctx, info) {
  uint32_t id = ArgId(info[0], "mipmapped array");
  unsigned level = ArgU32(info[1], "level");
  return ctx.Submit(info, Where::kContextThread, [id, level](Job &job) -> res::Num {
    if (!Have(job, cu::api().MipmappedArrayGetLevel, "cuMipmappedArrayGetLevel")) return {};
    CtxCore *c = job.ctx.get();
    auto it = c->mipmaps.find(id);
    if (it == c->mipmaps.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: mipmapLevel: no such mipmapped array"), res::Num{};
    auto known = it->second.levels.find(level);
    if (known != it->second.levels.end()) return {static_cast<double>(known->second)};
    cu::Array a = nullptr;
    if (!job.Check(cu::api().MipmappedArrayGetLevel(&a, it->second.m, level), "cuMipmappedArrayGetLevel")) return {};
    uint32_t aid = c->nextId++;
    c->arrays[aid] = a;
    it->second.levels[level] = aid;
    return {static_cast<double>(aid)};
  });
}

QCUDA_CONTEXT_METHOD(mipmapDestroy, ctx, info) {
  uint32_t id = ArgId(info[0], "mipmapped array");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) {
    if (!Have(job, cu::api().MipmappedArrayDestroy, "cuMipmappedArrayDestroy")) return;
    CtxCore *c = job.ctx.get();
    auto it = c->mipmaps.find(id);
    if (it == c->mipmaps.end()) return job.Fail(cu::kInvalidHandle, "qcuda: mipmapDestroy: no such mipmapped array");
    for (auto &lv : it->second.levels) c->arrays.erase(lv.second);  // its levels go with it
    cu::Mipmap m = it->second.m;
    c->mipmaps.erase(it);
    job.Check(cu::api().MipmappedArrayDestroy(m), "cuMipmappedArrayDestroy");
  });
}

// copy3D(records, segments | null, toDevice, stream, wait): each record one
// cuMemcpy3DAsync. With segments, host sides are offsets in a staging buffer
// of their total length: gathered from them before (toDevice), scattered to
// them once the copies are done (else). Resolves once the bytes have left or
// reached the segments; without segments, once enqueued unless wait.
QCUDA_CONTEXT_METHOD(copy3D, ctx, info) {
  std::vector<uint64_t> recs = ArgU64s(info[0], "records");
  if (recs.size() % kRecord != 0) throw Napi::RangeError::New(info.Env(), "copy3D: records of 17 u64");
  bool staged = !info[1].IsNull() && !info[1].IsUndefined();
  std::vector<Seg> segs = staged ? ArgSegs(info[1]) : std::vector<Seg>{};
  bool toDevice = info[2].ToBoolean();
  uint32_t sid = ArgId(info[3], "stream");
  bool wait = staged || info[4].ToBoolean();
  return ctx.Submit(info, Where::kContextThread,
                    [recs = std::move(recs), segs = std::move(segs), staged, toDevice, sid, wait](Job &job) {
                      if (!Have(job, cu::api().Memcpy3DAsync, "cuMemcpy3DAsync_v2")) return;
                      cu::Stream s;
                      if (!job.ctx->LookupStream(job, sid, &s)) return;
                      uint64_t len = SegsLength(segs);
                      std::shared_ptr<std::vector<uint8_t>> buf;
                      if (staged) {
                        try {
                          buf = std::make_shared<std::vector<uint8_t>>(len);
                        } catch (const std::bad_alloc &) {
                          return job.Fail(cu::kOutOfMemory, "qcuda: copy3D staging buffer");
                        }
                        // Gathered both ways: from the device, the buffer goes back whole,
                        // and the bytes between a box's rows (a pitch's gap) must come back
                        // as they were.
                        uint64_t at = 0;
                        for (const Seg &g : segs) {
                          std::memcpy(buf->data() + at, reinterpret_cast<const void *>(g.addr), g.len);
                          at += g.len;
                        }
                      }
                      bool ok = RunRecords(job, recs, buf ? buf->data() : nullptr, len, s);
                      if (!wait) return;
                      // Also after a failure: what was enqueued still uses the staging buffer.
                      WaitForStream(job, s);
                      auto inner = std::move(job.wait);
                      job.wait = [inner = std::move(inner), buf, segs, toDevice, ok](Job &jb) {
                        if (inner) inner(jb);
                        if (!buf || toDevice || !ok || jb.rc != cu::kSuccess) return;
                        uint64_t at = 0;
                        for (const Seg &g : segs) {
                          std::memcpy(reinterpret_cast<void *>(g.addr), buf->data() + at, g.len);
                          at += g.len;
                        }
                      };
                    });
}

// memset2D(dst, pitch, value, width, height, stream, wait): cuMemsetD2D8Async.
QCUDA_CONTEXT_METHOD(memset2D, ctx, info) {
  uint64_t dst = ArgU64(info[0], "dst");
  uint64_t pitch = ArgU64(info[1], "pitch");
  uint32_t value = ArgU32(info[2], "value") & 0xff;
  uint64_t width = ArgU64(info[3], "width");
  uint64_t height = ArgU64(info[4], "height");
  uint32_t sid = ArgId(info[5], "stream");
  bool wait = info[6].ToBoolean();
  return ctx.Submit(info, Where::kInlineWhenIdle, [dst, pitch, value, width, height, sid, wait](Job &job) {
    if (!Have(job, cu::api().MemsetD2D8Async, "cuMemsetD2D8Async")) return;
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return;
    if (width == 0 || height == 0) return;
    if (job.Check(cu::api().MemsetD2D8Async(dst, pitch, static_cast<unsigned char>(value), width, height, s),
                  "cuMemsetD2D8Async") &&
        wait)
      WaitForStream(job, s);
  });
}

// texCreate(record): record (u64 each) = resType, res (array or mipmapped
// array id, or device pointer), format, channels, width, height, pitch, size, addressMode[3],
// filterMode, flags, maxAnisotropy, mipmapFilterMode, then the float bits of
// mipmapLevelBias, minLod, maxLod, borderColor[4] -> the CUtexObject.
QCUDA_CONTEXT_METHOD(texCreate, ctx, info) {
  std::vector<uint64_t> r = ArgU64s(info[0], "texture record");
  if (r.size() != 22) throw Napi::RangeError::New(info.Env(), "texCreate: a record of 22 u64");
  return ctx.Submit(info, Where::kContextThread, [r = std::move(r)](Job &job) -> res::Big {
    if (!Have(job, cu::api().TexObjectCreate, "cuTexObjectCreate")) return {};
    cu::ResourceDesc rd;
    std::memset(&rd, 0, sizeof rd);
    rd.resType = static_cast<int>(r[0]);
    if (rd.resType == cu::kResArray) {
      auto it = job.ctx->arrays.find(static_cast<uint32_t>(r[1]));
      if (r[1] > UINT32_MAX || it == job.ctx->arrays.end())
        return job.Fail(cu::kInvalidHandle, "qcuda: texCreate: no such array"), res::Big{};
      rd.res.array.hArray = it->second;
    } else if (rd.resType == cu::kResMipmap) {
      auto it = job.ctx->mipmaps.find(static_cast<uint32_t>(r[1]));
      if (r[1] > UINT32_MAX || it == job.ctx->mipmaps.end())
        return job.Fail(cu::kInvalidHandle, "qcuda: texCreate: no such mipmapped array"), res::Big{};
      rd.res.mipmap.hMipmappedArray = it->second.m;
    } else if (rd.resType == cu::kResLinear) {
      rd.res.linear.devPtr = r[1], rd.res.linear.format = static_cast<int>(r[2]),
      rd.res.linear.numChannels = static_cast<unsigned>(r[3]);
      rd.res.linear.sizeInBytes = r[7];
    } else if (rd.resType == cu::kResPitch2D) {
      rd.res.pitch2D.devPtr = r[1], rd.res.pitch2D.format = static_cast<int>(r[2]),
      rd.res.pitch2D.numChannels = static_cast<unsigned>(r[3]);
      rd.res.pitch2D.width = r[4], rd.res.pitch2D.height = r[5], rd.res.pitch2D.pitchInBytes = r[6];
    } else {
      return job.Fail(cu::kInvalidValue, "qcuda: texCreate: resource type"), res::Big{};
    }
    cu::TextureDesc td;
    std::memset(&td, 0, sizeof td);
    for (int i = 0; i < 3; i++) td.addressMode[i] = static_cast<int>(r[8 + i]);
    td.filterMode = static_cast<int>(r[11]);
    td.flags = static_cast<unsigned>(r[12]);
    td.maxAnisotropy = static_cast<unsigned>(r[13]);
    td.mipmapFilterMode = static_cast<int>(r[14]);
    float f[7];
    for (int i = 0; i < 7; i++) {
      uint32_t bits = static_cast<uint32_t>(r[15 + i]);
      std::memcpy(&f[i], &bits, 4);
    }
    td.mipmapLevelBias = f[0], td.minMipmapLevelClamp = f[1], td.maxMipmapLevelClamp = f[2];
    for (int i = 0; i < 4; i++) td.borderColor[i] = f[3 + i];
    cu::TexObject t = 0;
    job.Check(cu::api().TexObjectCreate(&t, &rd, &td, nullptr), "cuTexObjectCreate");
    return {t};
  });
}

QCUDA_CONTEXT_METHOD(texDestroy, ctx, info) {
  uint64_t t = ArgU64(info[0], "texture object");
  return ctx.Submit(info, Where::kContextThread, [t](Job &job) {
    if (Have(job, cu::api().TexObjectDestroy, "cuTexObjectDestroy"))
      job.Check(cu::api().TexObjectDestroy(t), "cuTexObjectDestroy");
  });
}

// surfCreate(array id) -> the CUsurfObject
QCUDA_CONTEXT_METHOD(surfCreate, ctx, info) {
  uint32_t id = ArgId(info[0], "array");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) -> res::Big {
    if (!Have(job, cu::api().SurfObjectCreate, "cuSurfObjectCreate")) return {};
    auto it = job.ctx->arrays.find(id);
    if (it == job.ctx->arrays.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: surfCreate: no such array"), res::Big{};
    cu::ResourceDesc rd;
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cu::kResArray;
    rd.res.array.hArray = it->second;
    cu::TexObject s = 0;
    job.Check(cu::api().SurfObjectCreate(&s, &rd), "cuSurfObjectCreate");
    return {s};
  });
}

QCUDA_CONTEXT_METHOD(surfDestroy, ctx, info) {
  uint64_t s = ArgU64(info[0], "surface object");
  return ctx.Submit(info, Where::kContextThread, [s](Job &job) {
    if (Have(job, cu::api().SurfObjectDestroy, "cuSurfObjectDestroy"))
      job.Check(cu::api().SurfObjectDestroy(s), "cuSurfObjectDestroy");
  });
}

}  // namespace qcuda::cuda
