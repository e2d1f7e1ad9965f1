// GivenRanges (given.h): guest RAM a session mapped, copied through its alias.
#include "given.h"

#include <algorithm>

namespace qcuda::cuda {

void GivenRanges::Give(uint64_t addr, uint64_t len, uint64_t alias) {
  if (len == 0) return;
  ranges_[addr] = {len, alias};
}

void GivenRanges::Ungive(uint64_t addr, uint64_t alias) {
  auto it = ranges_.find(addr);
  if (it != ranges_.end() && it->second.alias == alias) ranges_.erase(it);
}

namespace {

void Append(std::vector<Seg> &out, uint64_t addr, uint64_t len) {
  if (!out.empty() && out.back().addr + out.back().len == addr) {
    out.back().len += len;
    return;
  }
  out.push_back({addr, len});
}

}  // namespace

std::vector<Seg> GivenRanges::Resolve(const std::vector<Seg> &segs) const {
  if (ranges_.empty()) return segs;
  std::vector<Seg> out;
  out.reserve(segs.size());
  for (const Seg &g : segs) {
    uint64_t at = g.addr, left = g.len;
    while (left > 0) {
      // The range holding `at`, if any: the last one starting at or before it.
      auto next = ranges_.upper_bound(at);
      if (next != ranges_.begin()) {
        auto in = std::prev(next);
        const uint64_t off = at - in->first;
        if (off < in->second.len) {
          const uint64_t n = std::min(left, in->second.len - off);
          Append(out, in->second.alias + off, n);
          at += n, left -= n;
          continue;
        }
      }
      // Not given: up to the next range, as it is.
      const uint64_t n = next == ranges_.end() ? left : std::min(left, next->first - at);
      Append(out, at, n);
      at += n, left -= n;
    }
  }
  return out;
}

}  // namespace qcuda::cuda
