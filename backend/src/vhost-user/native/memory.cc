// memfd and mmap for guest RAM. A Mapping owns one mmap; JS sees it through
// "windows": external ArrayBuffers of at most 4 GiB (N-API's limit) that do
// not copy. unmap() detaches every live window before munmap, so JS code that
// still holds a view reads zero-length memory instead of faulting.
#include "memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "errors.h"

namespace vhost_user {
namespace {

constexpr uint64_t kMaxWindow = 1ull << 32;

// Shared between the Mapping object and its windows; the last one to go
// frees it, and munmap happens exactly once.
struct Region {
  void *addr;
  uint64_t length;
  bool mapped;
  int refs;
};

void Release(Region *r) {
  if (--r->refs > 0) return;
  if (r->mapped) munmap(r->addr, r->length);
  delete r;
}

class Mapping : public Napi::ObjectWrap<Mapping> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Mapping",
        {InstanceMethod("window", &Mapping::Window), InstanceMethod("unmap", &Mapping::Unmap),
         InstanceAccessor("length", &Mapping::Length, nullptr), InstanceAccessor("address", &Mapping::Address, nullptr),
         InstanceAccessor("mapped", &Mapping::Mapped, nullptr)});
  }

  // new Mapping(fd, length, offset, random?): MAP_SHARED read/write; with
  // random, at an address drawn from the whole user address space.
  // new Mapping([[fd, offset, length], ...]): the pieces one after another,
  // at a random address (HOST_MAP_PAGES: scattered guest pages as one range).
  explicit Mapping(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Mapping>(info) {
    Napi::Env env = info.Env();
    if (info.Length() > 0 && info[0].IsArray()) {
      region_ = MapPieces(env, info[0].As<Napi::Array>());
      return;
    }
    int fd = ArgFd(info, 0);
    uint64_t length = ArgU64(info, 1, "length");
    uint64_t offset = ArgU64(info, 2, "offset");
    bool random = info.Length() > 3 && info[3].ToBoolean().Value();
    if (length == 0) ThrowRange(env, "mapping length must be > 0");
    if (offset % sysconf(_SC_PAGESIZE) != 0) ThrowRange(env, "mapping offset must be page aligned");
    void *p = random ? MapAtRandom(length, fd, offset) : MAP_FAILED;
    if (p == MAP_FAILED)
      p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) ThrowErrno(env, "mmap", errno);
    region_ = new Region{p, length, true, 1};
  }

  // Registered guest RAM can be read by any kernel of the process through
  // its host address (measured on the H100, whatever the registration
  // flags), so where it lies must not be guessable from anything a guest
  // sees: a 2 MiB-aligned address drawn from [2^40, 2^46) (x86-64 user space
  // is 2^47), where the kernel's own mmap placement has 28 bits of entropy
  // near a known base. MAP_FIXED_NOREPLACE never replaces another mapping;
  // after a few collisions the kernel chooses (MAP_FAILED here).
  static void *MapAtRandom(uint64_t length, int fd, uint64_t offset) {
    constexpr uint64_t kLow = 1ull << 40, kHigh = 1ull << 46, kAlign = 2ull << 20;
    if (length >= kHigh - kLow) return MAP_FAILED;
    for (int tries = 0; tries < 16; tries++) {
      uint64_t r;
      if (getrandom(&r, sizeof(r), 0) != sizeof(r)) return MAP_FAILED;
      uint64_t at = kLow + (r % ((kHigh - kLow - length) / kAlign)) * kAlign;
      // fd -1: an anonymous reservation with no access (pieces go over it).
      void *p = fd < 0 ? mmap(reinterpret_cast<void *>(at), length, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
                       : mmap(reinterpret_cast<void *>(at), length, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, fd, static_cast<off_t>(offset));
      if (p == reinterpret_cast<void *>(at)) return p;
      if (p != MAP_FAILED) munmap(p, length);  // a kernel before 4.17 took it as a hint only
    }
    return MAP_FAILED;
  }

  // Reserves the whole range (anonymous, no access) at a random address,
  // then maps each piece over its part of it.
  static Region *MapPieces(Napi::Env env, Napi::Array list) {
    struct Piece {
      int fd;
      uint64_t offset, length;
    };
    std::vector<Piece> pieces;
    uint64_t total = 0;
    const uint64_t page = sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < list.Length(); i++) {
      Napi::Array e = list.Get(i).As<Napi::Array>();
      Piece p{e.Get(0u).As<Napi::Number>().Int32Value(),
              static_cast<uint64_t>(e.Get(1u).As<Napi::Number>().Int64Value()),
              static_cast<uint64_t>(e.Get(2u).As<Napi::Number>().Int64Value())};
      if (p.fd < 0 || p.length == 0 || p.offset % page || p.length % page || p.length > (1ull << 46) - total)
        ThrowRange(env, "mapping pieces must be whole pages of a file");
      total += p.length;
      pieces.push_back(p);
    }
    if (pieces.empty()) ThrowRange(env, "a mapping of no pieces");
    void *base = MapAtRandom(total, -1, 0);
    if (base == MAP_FAILED) ThrowErrno(env, "mmap (reserve)", errno);
    uint64_t at = 0;
    for (const Piece &p : pieces) {
      void *want = static_cast<uint8_t *>(base) + at;
      if (mmap(want, p.length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, p.fd,
               static_cast<off_t>(p.offset)) != want) {
        int err = errno;
        munmap(base, total);
        ThrowErrno(env, "mmap (piece)", err);
      }
      at += p.length;
    }
    return new Region{base, total, true, 1};
  }

  ~Mapping() override { Release(region_); }

 private:
  Napi::Value Window(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    uint64_t offset = ArgU64(info, 0, "offset");
    uint64_t length = ArgU64(info, 1, "length");
    if (!region_->mapped) ThrowRange(env, "mapping is unmapped");
    if (length == 0 || length > kMaxWindow) ThrowRange(env, "window length must be 1..4 GiB");
    if (offset > region_->length || length > region_->length - offset)
      ThrowRange(env, "window lies outside the mapping");
    region_->refs++;
    Region *r = region_;
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(
        env, static_cast<uint8_t *>(r->addr) + offset, length, [](Napi::Env, void *, Region *hint) { Release(hint); },
        r);
    windows_.emplace_back(Napi::Weak(ab));
    return ab;
  }

  Napi::Value Unmap(const Napi::CallbackInfo &info) {
    if (!region_->mapped) return info.Env().Undefined();
    for (auto &w : windows_) {
      if (w.IsEmpty()) continue;
      Napi::ArrayBuffer ab = w.Value();
      if (!ab.IsEmpty() && !ab.IsDetached()) ab.Detach();
    }
    windows_.clear();
    munmap(region_->addr, region_->length);
    region_->mapped = false;
    return info.Env().Undefined();
  }

  Napi::Value Length(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), static_cast<double>(region_->length));
  }
  Napi::Value Address(const Napi::CallbackInfo &info) {
    return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(region_->addr)));
  }
  Napi::Value Mapped(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), region_->mapped); }

  Region *region_;
  std::vector<Napi::Reference<Napi::ArrayBuffer>> windows_;
};

Napi::Value MemfdCreate(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>().Utf8Value();
  uint64_t size = ArgU64(info, 1, "size");
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) ThrowErrno(env, "memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(size)) < 0) {
    int err = errno;
    close(fd);
    ThrowErrno(env, "ftruncate", err);
  }
  return Napi::Number::New(env, fd);
}

// fdInfo(fd) -> { size, seals }: seals is -1 for files that cannot be sealed.
// The backend needs both: touching a mapping past the end of its file raises
// SIGBUS, and an unsealed file can be shrunk under us later.
Napi::Value FdInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  struct stat st;
  if (fstat(fd, &st) < 0) ThrowErrno(env, "fstat", errno);
  int seals = fcntl(fd, F_GET_SEALS);
  Napi::Object out = Napi::Object::New(env);
  out.Set("size", static_cast<double>(st.st_size));
  out.Set("seals", seals);
  out.Set("regular", S_ISREG(st.st_mode));
  return out;
}

Napi::Value AddSeals(const Napi::CallbackInfo &info) {
  if (fcntl(ArgFd(info, 0), F_ADD_SEALS, info[1].As<Napi::Number>().Int32Value()) < 0)
    ThrowErrno(info.Env(), "fcntl(F_ADD_SEALS)", errno);
  return info.Env().Undefined();
}

}  // namespace

void InitMemory(Napi::Env env, Napi::Object exports) {
  exports.Set("Mapping", Mapping::Define(env));
  exports.Set("memfdCreate", Napi::Function::New(env, MemfdCreate));
  exports.Set("fdInfo", Napi::Function::New(env, FdInfo));
  exports.Set("addSeals", Napi::Function::New(env, AddSeals));
  exports.Set("pageSize", Napi::Number::New(env, static_cast<double>(sysconf(_SC_PAGESIZE))));
  exports.Set("F_SEAL_SHRINK", F_SEAL_SHRINK);
  exports.Set("F_SEAL_GROW", F_SEAL_GROW);
}

}  // namespace vhost_user
