// Structure checks of module images (see cuda_image.h).
#include "cuda_image.h"

#include <cstring>

namespace qcuda::cuda {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "images are read as little-endian, as the driver reads them");

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr uint32_t kElfMagic = 0x464C457Fu;  // "\x7fELF"
constexpr uint64_t kFatbinHeaderBytes = 16;  // {u32 magic, u16 version, u16 header_size, u64 fat_size}
// A fat binary entry's header: {u16 kind, u16 version, u32 header_size, u64 payload_size (the padded
// payload: a u32 and a u32 nvcc leaves 0; read whole, that refuses more, never less), u32 data_size,
// u32, u32 minor, u32 arch, u32, u32, u64 flags at 40, u64, u64 uncompressed_size at 56}: 64 bytes,
// 80 or 112 for newer targets. The payload follows the header; the next entry follows the payload.
constexpr uint64_t kEntryHeaderBytes = 64;
constexpr uint64_t kEntryCompressed = 0x2000 | 0x8000;  // flags: the payload is compressed (not looked into)
constexpr uint64_t kElfHeaderBytes = 64;                // Elf64_Ehdr
constexpr uint64_t kElfPhdrBytes = 56;                  // Elf64_Phdr
constexpr uint64_t kElfShdrBytes = 64;                  // Elf64_Shdr
constexpr uint64_t kElfSymBytes = 24;                   // Elf64_Sym
constexpr uint32_t kShtNull = 0, kShtNobits = 8;        // section types without bytes in the file
constexpr uint32_t kShtSymtab = 2, kShtDynsym = 11;

template <typename T>
T Get(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/** [at, at + len) inside [0, size), with no overflow. */
bool Inside(uint64_t at, uint64_t len, uint64_t size) { return at <= size && len <= size - at; }

std::string CheckElf(const uint8_t *p, uint64_t n) {
  if (n < kElfHeaderBytes) return "ELF header truncated (" + std::to_string(n) + " bytes)";
  if (p[4] != 2 || p[5] != 1) return "not a 64-bit little-endian ELF image";
  uint64_t phoff = Get<uint64_t>(p + 0x20);
  uint64_t shoff = Get<uint64_t>(p + 0x28);
  uint64_t ehsize = Get<uint16_t>(p + 0x34);
  uint64_t phentsize = Get<uint16_t>(p + 0x36);
  uint64_t phnum = Get<uint16_t>(p + 0x38);
  uint64_t shentsize = Get<uint16_t>(p + 0x3a);
  uint64_t shnum = Get<uint16_t>(p + 0x3c);
  uint64_t shstrndx = Get<uint16_t>(p + 0x3e);
  if (ehsize > n) return "ELF header size " + std::to_string(ehsize) + " past the image";
  if (phnum == 0xffff) return "ELF extended program header numbering";
  if (phnum != 0) {
    if (phentsize < kElfPhdrBytes || !Inside(phoff, phentsize * phnum, n))
      return "ELF program headers (" + std::to_string(phnum) + " x " + std::to_string(phentsize) + " at " +
             std::to_string(phoff) + ") outside the image";
    for (uint64_t i = 0; i < phnum; i++) {
      const uint8_t *ph = p + phoff + i * phentsize;
      if (!Inside(Get<uint64_t>(ph + 8), Get<uint64_t>(ph + 32), n))  // p_offset, p_filesz
        return "ELF segment " + std::to_string(i) + " outside the image";
    }
  }
  if (shnum == 0) {
    // With e_shoff set, e_shnum 0 means "the count is in section 0" (extended numbering): no cubin does that.
    if (shoff != 0) return "ELF extended section numbering";
    return "";
  }
  if (shentsize < kElfShdrBytes || !Inside(shoff, shentsize * shnum, n))
    return "ELF section headers (" + std::to_string(shnum) + " x " + std::to_string(shentsize) + " at " +
           std::to_string(shoff) + ") outside the image";
  if (shstrndx >= shnum) return "ELF section name table " + std::to_string(shstrndx) + " of " + std::to_string(shnum);
  auto sh = [&](uint64_t i) { return p + shoff + i * shentsize; };
  // The bytes a section has in the file (none for NULL and NOBITS ones).
  auto bytes = [&](uint64_t i) {
    uint32_t type = Get<uint32_t>(sh(i) + 4);
    return type == kShtNull || type == kShtNobits ? 0 : Get<uint64_t>(sh(i) + 32);
  };
  for (uint64_t i = 0; i < shnum; i++) {
    if (!Inside(Get<uint64_t>(sh(i) + 24), bytes(i), n))  // sh_offset, sh_size
      return "ELF section " + std::to_string(i) + " outside the image";
  }
  // Names are read as C strings at an offset into a string table: the offset must lie inside it
  // (the string then ends inside the image, or at the padding after it).
  for (uint64_t i = 0; i < shnum; i++) {
    uint64_t name = Get<uint32_t>(sh(i));
    if (name != 0 && name >= bytes(shstrndx))
      return "ELF section " + std::to_string(i) + "'s name outside the name table";
    uint32_t type = Get<uint32_t>(sh(i) + 4);
    if (type != kShtSymtab && type != kShtDynsym) continue;
    uint64_t link = Get<uint32_t>(sh(i) + 40), entsize = Get<uint64_t>(sh(i) + 56);
    if (link >= shnum || entsize < kElfSymBytes) return "ELF symbol table " + std::to_string(i) + " malformed";
    const uint8_t *syms = p + Get<uint64_t>(sh(i) + 24);
    for (uint64_t k = 0, count = bytes(i) / entsize; k < count; k++) {
      uint64_t sym = Get<uint32_t>(syms + k * entsize);  // st_name
      if (sym != 0 && sym >= bytes(link))
        return "ELF symbol " + std::to_string(k) + " of section " + std::to_string(i) +
               ": name outside its string table";
    }
  }
  return "";
}

std::string CheckFatbin(const uint8_t *p, uint64_t n) {
  if (n < kFatbinHeaderBytes) return "fat binary header truncated";
  uint64_t headerSize = Get<uint16_t>(p + 6);
  uint64_t fatSize = Get<uint64_t>(p + 8);
  if (headerSize < kFatbinHeaderBytes || !Inside(headerSize, fatSize, n))
    return "fat binary of " + std::to_string(headerSize) + " + " + std::to_string(fatSize) + " bytes in an image of " +
           std::to_string(n);
  const uint64_t end = headerSize + fatSize;
  uint64_t at = headerSize;
  uint64_t entries = 0;
  while (at < end) {
    std::string which = "fat binary entry " + std::to_string(entries);
    if (end - at < kEntryHeaderBytes) return which + " truncated";
    const uint8_t *e = p + at;
    uint64_t eh = Get<uint32_t>(e + 4);
    uint64_t size = Get<uint64_t>(e + 8);
    if (eh < kEntryHeaderBytes || !Inside(at, eh, end) || !Inside(at + eh, size, end))
      return which + " (" + std::to_string(eh) + " + " + std::to_string(size) + " bytes at " + std::to_string(at) +
             ") runs past the fat binary's end at " + std::to_string(end);
    const uint8_t *payload = e + eh;
    if ((Get<uint64_t>(e + 40) & kEntryCompressed) == 0 && size >= 4 && Get<uint32_t>(payload) == kElfMagic) {
      std::string why = CheckElf(payload, size);
      if (!why.empty()) return which + ": " + why;
    }
    at += eh + size;
    entries++;
  }
  if (entries == 0) return "fat binary without entries";
  return "";
}

std::string CheckText(const uint8_t *p, uint64_t n) {
  if (p[0] >= 0x80)
    return "neither a fat binary, an ELF image nor text (starts with byte " + std::to_string(p[0]) + ")";
  uint64_t i = 0;
  for (; i < n && p[i] != 0; i++) {
    uint8_t c = p[i];
    bool ok = c >= 0x20 ? c != 0x7f : (c >= '\t' && c <= '\r');
    if (!ok)
      return "neither a fat binary, an ELF image nor text (byte " + std::to_string(c) + " at " + std::to_string(i) +
             ")";
  }
  if (i == 0) return "empty text";
  return "";
}

}  // namespace

std::string CheckModuleImage(const uint8_t *image, size_t n) {
  if (n == 0) return "empty";
  if (n >= 4 && Get<uint32_t>(image) == kFatbinMagic) return CheckFatbin(image, n);
  if (n >= 4 && Get<uint32_t>(image) == kElfMagic) return CheckElf(image, n);
  return CheckText(image, n);
}

}  // namespace qcuda::cuda
