// The JS arguments of the CUDA addon's calls, checked and converted in one
// place: every call reads its arguments on the JS thread before it makes a
// job, and a bad one throws there (TypeError/RangeError), never reaching the
// driver. The dispatcher (backend/src/qcuda/commands/) has checked ids and
// value ranges already; these checks keep the addon safe on its own.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace qcuda::cuda {

/** A bigint, or a number that is a non-negative safe integer. */
uint64_t ArgU64(const Napi::Value &v, const char *what);
/** A handle id (u32); undefined or null is 0 (the legacy NULL stream, for streams). */
uint32_t ArgId(const Napi::Value &v, const char *what);
/** A u32; undefined is 0. */
uint32_t ArgU32(const Napi::Value &v, const char *what);
/** A number that is a 32-bit integer. */
int32_t ArgI32(const Napi::Value &v, const char *what);
/** A number, as Int32Value() reads it; anything else is `otherwise`. */
int32_t ArgI32Or(const Napi::Value &v, int32_t otherwise);

/** A host range (guest RAM mapped in this process). */
struct Seg {
  uint64_t addr;
  uint64_t len;
};
/** An array of {addr, len}, or a Float64Array of [addr, len] pairs; empty ranges are left out. */
std::vector<Seg> ArgSegs(const Napi::Value &v);
/** A Uint8Array (a view: read it before the call returns). */
Napi::Uint8Array ArgUint8Array(const Napi::Value &v, const char *what);
/** A copy of a Uint8Array's bytes. */
std::vector<uint8_t> ArgBytes(const Napi::Value &v, const char *what);
/** A copy of a BigUint64Array's values (records of u64 fields). */
std::vector<uint64_t> ArgU64s(const Napi::Value &v, const char *what);
/** A copy of a Uint32Array's values. */
std::vector<uint32_t> ArgU32s(const Napi::Value &v, const char *what);
/** A string without NULs (a kernel or variable name). */
std::string ArgName(const Napi::Value &v);
/** An array of 3 u32, or a Uint32Array of 3 (grid or block dimensions). */
void ArgDims(const Napi::Value &v, const char *what, unsigned out[3]);

}  // namespace qcuda::cuda
