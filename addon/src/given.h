// Guest RAM that a session mapped for the GPU (HOST_MAP, HOST_MAP_PAGES),
// known by where it lies in this process's mapping of guest RAM.
//
// Guest RAM itself is not registered with the driver: registered host memory
// is reachable by every kernel of the process (measured on the H200: any
// cuMemHostRegister, with any flags and from any context), so a guest
// process's kernel could read all guest RAM at a guessed address. What a
// session mapped is registered, through an alias of its pages; a copy whose
// guest bytes lie there goes through the alias at pinned speed, and the rest
// of guest RAM is copied as pageable memory (the driver stages it, as it does
// natively for pageable memory).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "cuda_args.h"

namespace qcuda::cuda {

class GivenRanges {
 public:
  /** [addr, addr+len) of guest RAM is also mapped, registered, at alias. A later Give of addr replaces it. */
  void Give(uint64_t addr, uint64_t len, uint64_t alias);
  /** Forgets addr's range, if it is still the one mapped at alias. */
  void Ungive(uint64_t addr, uint64_t alias);
  /**
   * segs with each part that lies in a given range moved to its alias, and
   * parts that then touch joined (a copy from scattered pinned pages is one
   * range in their alias); the rest as it was.
   */
  std::vector<Seg> Resolve(const std::vector<Seg> &segs) const;
  size_t size() const { return ranges_.size(); }

 private:
  struct Range {
    uint64_t len;
    uint64_t alias;
  };
  std::map<uint64_t, Range> ranges_;
};

}  // namespace qcuda::cuda
