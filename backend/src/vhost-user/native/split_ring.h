// The split virtqueue's layout and notification rule (virtio 1.2, 2.7), once,
// for the C that touches a ring in guest memory itself: the device side of
// the ring server (guest_ring.cc: walks, takes, answers and signals) and the
// driver side of the benchmarks' loop (ring_loop.cc: posts, kicks and waits).
// Indices are into the ring's parts as the typed arrays JavaScript hands
// over see them: avail and used as u16 words, used's elements as u32 words.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vhost_user::vring {

// A descriptor: u64 addr, u32 len, u16 flags, u16 next.
constexpr size_t kDescBytes = 16;
constexpr uint16_t kDescNext = 1, kDescWrite = 2, kDescIndirect = 4;

// avail: u16 flags, u16 idx, u16 ring[size], u16 used_event.
constexpr uint16_t kAvailNoInterrupt = 1;
constexpr size_t kAvailFlags = 0, kAvailIdx = 1;
constexpr size_t AvailWords(uint32_t size) { return 3 + size; }
/** The avail ring's entry for index idx (size a power of two). */
constexpr size_t AvailSlot(uint16_t idx, uint32_t size) { return 2 + (idx & (size - 1)); }
/** used_event: where the driver wants an interrupt (EVENT_IDX). */
constexpr size_t UsedEvent(uint32_t size) { return 2 + size; }

// used: u16 flags, u16 idx, {u32 id, u32 len} ring[size], u16 avail_event.
constexpr uint16_t kUsedNoNotify = 1;
constexpr size_t kUsedFlags = 0, kUsedIdx = 1;
constexpr size_t UsedWords(uint32_t size) { return 3 + size * 4; }
/** The used ring's entry for index idx: its id, as a u32 word (its len is the next word). */
constexpr size_t UsedId(uint16_t idx, uint32_t size) { return 1 + (idx & (size - 1)) * 2; }
/** avail_event: where the device wants a kick (EVENT_IDX). */
constexpr size_t AvailEvent(uint32_t size) { return 2 + size * 4; }

/** vring_need_event: whether moving an index from old to now passes event, the other side's wish (EVENT_IDX). */
constexpr bool NeedEvent(uint16_t event, uint16_t now, uint16_t old) {
  return static_cast<uint16_t>(now - event - 1) < static_cast<uint16_t>(now - old);
}

}  // namespace vhost_user::vring
