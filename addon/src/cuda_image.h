// Module images from the guest, checked before cuModuleLoadData sees them.
//
// The driver trusts what it is given: it reads a PTX image as a C string (an
// image without a NUL that ended at a page boundary made it read past the end:
// SIGSEGV, finding 7 of the security review), and follows the offsets and
// sizes in ELF and fat binary headers. So the addon hands the driver a copy
// of the image with kImagePadding zero bytes after it, whatever the caller
// passed, and accepts only:
//  - a fat binary (magic 0xBA55ED50) whose header and every entry lie inside
//    the image, an uncompressed ELF entry being checked as below;
//  - an ELF64 little-endian image (a cubin) whose header, program header
//    table, section header table, and every segment's and section's bytes
//    lie inside the image, and whose section and symbol names start inside
//    their string tables (what else sections say, relocations for one, is
//    left to the driver);
//  - text (PTX): up to its first NUL, no control characters but whitespace,
//    and not starting with a byte >= 0x80 (so no other binary format, such
//    as a fat binary wrapper 0x466243B1, reaches the driver as "text").
// Everything else fails with CUDA_ERROR_INVALID_IMAGE (cudaErrorInvalidKernelImage).
// The backend checks the same before it gets here (backend/src/qcuda/modules/module-image.ts);
// this is the last line of defence, kept small on purpose: it bounds what the
// driver reads, it does not judge whether the code makes sense.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qcuda::cuda {

/** Zero bytes after every module image the driver gets. */
constexpr size_t kImagePadding = 16;

/** "" when image[0, n) may go to cuModuleLoadData (with kImagePadding zeros after it), else why not. */
std::string CheckModuleImage(const uint8_t *image, size_t n);

}  // namespace qcuda::cuda
