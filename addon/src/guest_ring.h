// A split virtqueue served from C, the ring side of the ring server
// (cuda_ring_server.cc): the ring's three parts and guest memory as mapped
// in this process, a chain walked by chain.ts's rules, and requests taken,
// published and signalled as vring.ts does, with the in-flight record kept
// as vhost-user/inflight.ts lays it out. JavaScript owns the ring; this
// runs only inside its turn (Vring calls the server where it would take
// the next request), and the two hand the ring's indices to each other in
// the cursor (Uint32Array words, RingWord).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_args.h"
#include "vhost-user/native/split_ring.h"

namespace qcuda::cuda {

namespace vring = vhost_user::vring;

/** The cursor's words that say where the ring stands (in and out of each serve()); the server's own follow. */
enum RingWord { kLastAvail = 0, kUsedIdx = 1, kSignalledUsed = 2, kRingWords = 3 };

/** A guest memory region and where it is mapped here. */
struct Region {
  uint64_t gpa, size;
  uint8_t *host;
};

/** A request's buffers as host ranges: the device-readable ones, then the writable ones. */
struct Chain {
  std::vector<Seg> readable, writable;
  uint64_t readableBytes = 0, writableBytes = 0;
  void Clear() {
    readable.clear();
    writable.clear();
    readableBytes = writableBytes = 0;
  }
};

/**
 * Calls piece(host range) for each part of [offset, offset+len) of a
 * chain's buffers, in order (request.ts: pieces); false, having called it
 * for none, if the range runs past them.
 */
template <typename Piece>
bool EachPiece(const std::vector<Seg> &bufs, uint64_t offset, uint64_t len, Piece piece) {
  uint64_t total = 0;
  for (const Seg &b : bufs) total += b.len;
  if (offset > total || len > total - offset) return false;
  for (const Seg &b : bufs) {
    if (len == 0) break;
    if (offset >= b.len) {
      offset -= b.len;
      continue;
    }
    const uint64_t n = b.len - offset < len ? b.len - offset : len;
    piece(Seg{b.addr + offset, n});
    offset = 0;
    len -= n;
  }
  return true;
}

/** [offset, offset+len) of a chain's buffers as host ranges. */
inline bool Slice(const std::vector<Seg> &bufs, uint64_t offset, uint64_t len, std::vector<Seg> *out) {
  return EachPiece(bufs, offset, len, [out](Seg g) { out->push_back(g); });
}

/** Copies [offset, offset+n) of a chain's buffers out (read once: the guest may change them meanwhile). */
inline bool Gather(const std::vector<Seg> &bufs, uint64_t offset, uint8_t *out, uint64_t n) {
  return EachPiece(bufs, offset, n, [&out](Seg g) {
    std::memcpy(out, reinterpret_cast<const void *>(g.addr), g.len);
    out += g.len;
  });
}

inline void Scatter(const std::vector<Seg> &bufs, uint64_t offset, const uint8_t *in, uint64_t n) {
  EachPiece(bufs, offset, n, [&in](Seg g) {
    std::memcpy(reinterpret_cast<void *>(g.addr), in, g.len);
    in += g.len;
  });
}

class GuestRing {
 public:
  /** Buffers a chain walked here may have; longer chains (large scattered transfers) are left to JavaScript. */
  static constexpr size_t kMaxBufs = 64;
  /** A descriptor's bytes (addr, len, flags, next). */
  static constexpr size_t kDescBytes = vring::kDescBytes;

  /** The ring's parts (desc: size descriptors; avail and used: as the split ring lays them out) and its call eventfd.
   */
  void Attach(uint8_t *desc, uint16_t *avail, uint16_t *used, uint32_t size, bool eventIdx, bool indirect,
              uint32_t maxIndirect, int callFd);
  void SetRegions(std::vector<Region> regions) { regions_ = std::move(regions); }
  /** The in-flight record's bytes (null: none); recordBytes(size) of them. */
  void SetRecord(uint8_t *record) { record_ = record; }
  static size_t RecordBytes(uint32_t size);
  /** Where the ring's indices are handed over (at least kRingWords). */
  void SetCursor(uint32_t *cursor) { cursor_ = cursor; }

  bool attached() const { return desc_ != nullptr; }
  uint32_t size() const { return size_; }
  /** avail->idx as the driver last published it. */
  uint16_t AvailIdx() const { return __atomic_load_n(&avail_[vring::kAvailIdx], __ATOMIC_ACQUIRE); }
  uint16_t LastAvail() const { return static_cast<uint16_t>(cursor_[kLastAvail]); }
  /** The head the driver made available at lastAvail. */
  uint16_t HeadAt(uint16_t lastAvail) const {
    return __atomic_load_n(&avail_[vring::AvailSlot(lastAvail, size_)], __ATOMIC_RELAXED);
  }

  /** The chain at head as host ranges, by chain.ts's rules; false (c unusable) if it breaks one or is longer than
   * kMaxBufs. */
  bool Walk(uint16_t head, Chain *c) const;
  /** head taken: lastAvail moves on, and the record marks it in flight. */
  void Took(uint16_t head);
  /** head answered with len bytes written: in the used ring, and no longer in flight in the record (counted as answered
   * in C). */
  void Publish(uint16_t head, uint32_t len);
  /** Interrupts the driver if it asked for it (EVENT_IDX's used_event, or NO_INTERRUPT). */
  void Signal();

 private:
  /** Guest-physical [gpa, gpa+len) as a host pointer: the whole range inside one region (MemoryTable.checkGpa). */
  uint8_t *Translate(uint64_t gpa, uint64_t len) const;

  uint8_t *desc_ = nullptr;
  uint16_t *avail_ = nullptr, *used16_ = nullptr;
  uint32_t size_ = 0, maxIndirect_ = 0;
  bool eventIdx_ = false, indirect_ = false;
  int callFd_ = -1;
  uint8_t *record_ = nullptr;
  uint32_t *cursor_ = nullptr;
  std::vector<Region> regions_;
};

}  // namespace qcuda::cuda
