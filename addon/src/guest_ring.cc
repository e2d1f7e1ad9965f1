// GuestRing (guest_ring.h): a split virtqueue walked, taken, answered and
// signalled from C by the rules vring.ts and chain.ts follow.
#include "guest_ring.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace qcuda::cuda {
namespace {

using vring::kDescIndirect;
using vring::kDescNext;
using vring::kDescWrite;
// The in-flight record (vhost-user/inflight.ts): u16 lastAvail, u16 usedIdx, u32 size, u32 served, u32 servedInC, a bit
// per head.
constexpr size_t kRecLastAvail = 0, kRecUsedIdx = 2, kRecServed = 8, kRecServedInC = 12, kRecBits = 16;

struct Desc {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};
static_assert(sizeof(Desc) == GuestRing::kDescBytes, "a virtq descriptor is 16 bytes");

}  // namespace

void GuestRing::Attach(uint8_t *desc, uint16_t *avail, uint16_t *used, uint32_t size, bool eventIdx, bool indirect,
                       uint32_t maxIndirect, int callFd) {
  desc_ = desc;
  avail_ = avail;
  used16_ = used;
  size_ = size;
  eventIdx_ = eventIdx;
  indirect_ = indirect;
  maxIndirect_ = maxIndirect;
  callFd_ = callFd;
}

size_t GuestRing::RecordBytes(uint32_t size) { return kRecBits + (size + 7) / 8; }

uint8_t *GuestRing::Translate(uint64_t gpa, uint64_t len) const {
  for (const Region &r : regions_)
    if (gpa >= r.gpa && len <= r.size && gpa - r.gpa <= r.size - len) return r.host + (gpa - r.gpa);
  return nullptr;
}

bool GuestRing::Walk(uint16_t head, Chain *c) const {
  c->Clear();
  if (head >= size_) return false;
  const uint8_t *table = desc_;
  uint32_t count = size_, i = head, budget = size_;
  bool indirect = false;
  for (;;) {
    if (budget-- == 0) return false;
    Desc d;
    std::memcpy(&d, table + static_cast<size_t>(i) * sizeof(Desc), sizeof d);  // read once
    if (d.flags & kDescIndirect) {
      if (!indirect_ || indirect || (d.flags & kDescNext)) return false;
      if (d.len == 0 || d.len % sizeof(Desc) != 0 || d.len / sizeof(Desc) > maxIndirect_) return false;
      const uint8_t *t = Translate(d.addr, d.len);
      // JavaScript maps guest memory in windows and refuses a table across
      // two; a table inside one page is inside one window.
      if (t == nullptr || (reinterpret_cast<uintptr_t>(t) & 4095) + d.len > 4096) return false;
      table = t;
      count = budget = d.len / sizeof(Desc);
      i = 0;
      indirect = true;
      continue;
    }
    if (d.len != 0) {
      uint8_t *p = Translate(d.addr, d.len);
      if (p == nullptr) return false;
      const Seg s{reinterpret_cast<uint64_t>(p), d.len};
      if (d.flags & kDescWrite) {
        c->writable.push_back(s);
        c->writableBytes += d.len;
      } else {
        if (!c->writable.empty()) return false;
        c->readable.push_back(s);
        c->readableBytes += d.len;
      }
      if (c->readable.size() + c->writable.size() > kMaxBufs) return false;
    }
    if (!(d.flags & kDescNext)) return true;
    i = d.next;
    if (i >= count) return false;
  }
}

void GuestRing::Took(uint16_t head) {
  const uint16_t next = static_cast<uint16_t>(cursor_[kLastAvail] + 1);
  cursor_[kLastAvail] = next;
  if (record_ == nullptr) return;
  record_[kRecBits + (head >> 3)] |= static_cast<uint8_t>(1u << (head & 7));
  __atomic_store_n(reinterpret_cast<uint16_t *>(record_ + kRecLastAvail), next, __ATOMIC_RELEASE);
}

void GuestRing::Publish(uint16_t head, uint32_t len) {
  uint16_t usedIdx = static_cast<uint16_t>(cursor_[kUsedIdx]);
  uint32_t *used32 = reinterpret_cast<uint32_t *>(used16_);
  const size_t id = vring::UsedId(usedIdx, size_);
  used32[id] = head;
  used32[id + 1] = len;
  usedIdx++;
  __atomic_store_n(&used16_[vring::kUsedIdx], usedIdx, __ATOMIC_SEQ_CST);
  cursor_[kUsedIdx] = usedIdx;
  if (record_ == nullptr) return;
  record_[kRecBits + (head >> 3)] &= static_cast<uint8_t>(~(1u << (head & 7)));
  __atomic_store_n(reinterpret_cast<uint16_t *>(record_ + kRecUsedIdx), usedIdx, __ATOMIC_RELEASE);
  __atomic_fetch_add(reinterpret_cast<uint32_t *>(record_ + kRecServed), 1u, __ATOMIC_RELAXED);
  __atomic_fetch_add(reinterpret_cast<uint32_t *>(record_ + kRecServedInC), 1u, __ATOMIC_RELAXED);
}

void GuestRing::Signal() {
  const uint16_t now = static_cast<uint16_t>(cursor_[kUsedIdx]), old = static_cast<uint16_t>(cursor_[kSignalledUsed]);
  if (now == old) return;
  cursor_[kSignalledUsed] = now;
  bool need;
  if (eventIdx_) {
    need = vring::NeedEvent(__atomic_load_n(&avail_[vring::UsedEvent(size_)], __ATOMIC_SEQ_CST), now, old);
  } else {
    need = (__atomic_load_n(&avail_[vring::kAvailFlags], __ATOMIC_SEQ_CST) & vring::kAvailNoInterrupt) == 0;
  }
  if (!need) return;
  const uint64_t one = 1;
  // The frontend shares this fd's flags and may have cleared O_NONBLOCK (vhost-user/native/eventfd.cc says why).
  const int fl = fcntl(callFd_, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK) == 0) fcntl(callFd_, F_SETFL, fl | O_NONBLOCK);
  ssize_t w;
  do w = write(callFd_, &one, sizeof one);
  while (w < 0 && errno == EINTR);  // EAGAIN: the counter is full, so the driver is being signalled anyway
}

}  // namespace qcuda::cuda
