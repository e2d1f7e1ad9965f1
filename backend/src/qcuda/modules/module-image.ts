// Module images from the guest, checked before the driver sees them. The
// driver trusts what it is given: a PTX image is read as a C string (one not
// NUL-terminated that ends at a page boundary crashed the process inside
// cuModuleLoadData), and ELF and fat binary headers carry sizes it follows.
// So: images are kept with NUL padding after them (Session's uploads), every
// size in an ELF or fatbin header must lie inside the uploaded length, and
// the device memory the module will take is read from the image, so that a
// load cannot take the VM past its quota (a 100-byte PTX declaring an 8 GiB
// .global took 8 GiB at load). What the image declares is counted before
// the load; what the load took is measured after it where the provider can
// (the cuda addon), and the larger of the two is counted. The measurement
// is a free-memory delta that another process's free can cancel, so what
// the image declares must be complete: a cubin's globals, constant banks
// and code, a PTX text's .global and .const variables read exactly
// (ptx-globals.ts, which refuses what it cannot read), the largest entry of
// a fat binary. Only a compressed fat binary entry is not looked into.
import { CudaErr, CudaError } from '../cuda-error';
import { ptxGlobalBytes } from './ptx-globals';

/** Zero bytes kept after every image (a PTX image is read up to a NUL). */
export const IMAGE_PADDING = 16;

export const FATBIN_MAGIC = 0xba55ed50;
const ELF_MAGIC = 0x464c457f; // "\x7fELF" read little-endian
const SHT_NOBITS = 8;
/** Fat binary entry kinds. */
const ENTRY_PTX = 1;
const ENTRY_ELF = 2;
/** Entry flags saying the payload is compressed (then it is not looked into). */
const ENTRY_COMPRESSED = 0x2000n | 0x8000n;
/** The smallest fat binary entry header (the flags lie inside it). */
const ENTRY_HEADER = 64;

export interface ImageInfo {
  kind: 'ptx' | 'elf' | 'fatbin';
  /**
   * Device memory the module takes as far as the image says: a cubin's
   * globals, constant banks and code; PTX's .global and .const variables
   * (its code's size is known only after the JIT, and measured then); a
   * lower bound where a fat binary's payload is compressed.
   */
  globalBytes: bigint;
}

const invalid = (why: string) => new CudaError(CudaErr.InvalidKernelImage, `module image: ${why}`);

/** Checks an image's structure against its length and estimates its globals; throws cudaErrorInvalidKernelImage. */
export function checkImage(image: Uint8Array): ImageInfo {
  if (image.length < 4) throw invalid(`${image.length} bytes`);
  const v = view(image);
  const magic = v.getUint32(0, true);
  if (magic === FATBIN_MAGIC) return { kind: 'fatbin', globalBytes: checkFatbin(image) };
  if (magic === ELF_MAGIC) return { kind: 'elf', globalBytes: checkElf(image) };
  return { kind: 'ptx', globalBytes: checkPtx(image) };
}

function view(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/** [at, at+len) inside [0, size)? (BigInt: header fields are 64-bit.) */
function inside(at: bigint, len: bigint, size: number): boolean {
  return at >= 0n && len >= 0n && at + len <= BigInt(size);
}

// ---- fat binaries: {u32 magic, u16 version, u16 header_size, u64 fat_size}, then entries
// {u16 kind, u16 version, u32 header_size, u64 payload_size (padded), ..., u64 flags at 40}: a
// header of 64, 80 or 112 bytes (nvcc 13), the payload after it; flag 0x8000 is zstd, 0x2000 LZ4

function checkFatbin(b: Uint8Array): bigint {
  const v = view(b);
  if (b.length < 16) throw invalid('fat binary header truncated');
  const headerSize = v.getUint16(6, true);
  const fatSize = v.getBigUint64(8, true);
  if (headerSize < 16 || !inside(BigInt(headerSize), fatSize, b.length))
    throw invalid(`fat binary of ${headerSize} + ${fatSize} bytes in an image of ${b.length}`);
  const end = headerSize + Number(fatSize);
  let at = headerSize;
  let most = 0n;
  let entries = 0;
  while (at < end) {
    if (end - at < ENTRY_HEADER) throw invalid(`fat binary entry ${entries} truncated`);
    const kind = v.getUint16(at, true);
    const eh = v.getUint32(at + 4, true);
    const size = v.getBigUint64(at + 8, true);
    if (eh < ENTRY_HEADER || !inside(BigInt(at), BigInt(eh) + size, end))
      throw invalid(`fat binary entry ${entries} (${eh} + ${size} bytes at ${at}) runs past the fat binary's ${end} bytes`);
    const padded = Number(size);
    const flags = v.getBigUint64(at + 40, true);
    const payload = b.subarray(at + eh, at + eh + padded);
    if ((flags & ENTRY_COMPRESSED) === 0n && payload.length > 0) {
      // The driver loads one entry (its SM's code, else PTX): the largest bounds it.
      const g = kind === ENTRY_ELF ? checkElf(payload) : kind === ENTRY_PTX ? checkPtx(payload) : 0n;
      if (g > most) most = g;
    }
    at += eh + padded;
    entries++;
  }
  if (entries === 0) throw invalid('fat binary without entries');
  return most;
}

// ---- ELF64 little-endian (cubins)

/**
 * The sections a load puts in device memory: globals (.nv.global, NOBITS,
 * and .nv.global.init), constant banks (.nv.constant0.<kernel>: parameters,
 * 2: the compiler's, 3: .const variables) and code (.text.<function>).
 * Their sizes are what the image itself says the module takes, which the
 * quota counts whatever a measurement after the load says.
 */
const LOADED_SECTIONS = /^(\.nv\.global|\.nv\.constant|\.text)/;

function checkElf(b: Uint8Array): bigint {
  const v = view(b);
  if (b.length < 64) throw invalid('ELF header truncated');
  if (b[4] !== 2 || b[5] !== 1) throw invalid('not a 64-bit little-endian ELF image');
  const phoff = v.getBigUint64(0x20, true);
  const shoff = v.getBigUint64(0x28, true);
  const phentsize = v.getUint16(0x36, true);
  const phnum = v.getUint16(0x38, true);
  const shentsize = v.getUint16(0x3a, true);
  const shnum = v.getUint16(0x3c, true);
  const shstrndx = v.getUint16(0x3e, true);
  if (phnum > 0 && (phentsize < 56 || !inside(phoff, BigInt(phentsize) * BigInt(phnum), b.length)))
    throw invalid(`ELF program headers (${phnum} x ${phentsize} at ${phoff}) outside the image of ${b.length} bytes`);
  if (shnum === 0) return 0n;
  if (shentsize < 64 || !inside(shoff, BigInt(shentsize) * BigInt(shnum), b.length))
    throw invalid(`ELF section headers (${shnum} x ${shentsize} at ${shoff}) outside the image of ${b.length} bytes`);
  if (shstrndx >= shnum) throw invalid(`ELF section name table ${shstrndx} of ${shnum}`);
  const sec = (i: number) => {
    const o = Number(shoff) + i * shentsize;
    return {
      name: v.getUint32(o, true),
      type: v.getUint32(o + 4, true),
      offset: v.getBigUint64(o + 24, true),
      size: v.getBigUint64(o + 32, true),
    };
  };
  for (let i = 0; i < shnum; i++) {
    const s = sec(i);
    if (s.type !== SHT_NOBITS && s.type !== 0 && !inside(s.offset, s.size, b.length))
      throw invalid(`ELF section ${i} (${s.size} bytes at ${s.offset}) outside the image of ${b.length} bytes`);
  }
  const names = sec(shstrndx);
  const strtab = b.subarray(Number(names.offset), Number(names.offset + names.size));
  let bytes = 0n;
  for (let i = 0; i < shnum; i++) {
    const s = sec(i);
    if (LOADED_SECTIONS.test(sectionName(strtab, s.name))) bytes += s.size;
  }
  return bytes;
}

function sectionName(strtab: Uint8Array, at: number): string {
  if (at >= strtab.length) return '';
  let end = strtab.indexOf(0, at);
  if (end < 0) end = strtab.length;
  return Buffer.from(strtab.subarray(at, end)).toString('latin1');
}

// ---- PTX: text up to the first NUL (ptx-globals.ts reads its variables)

function checkPtx(b: Uint8Array): bigint {
  let end = b.indexOf(0);
  if (end < 0) end = b.length;
  const text = Buffer.from(b.buffer, b.byteOffset, end).toString('latin1');
  if (!/^\s*(\/\/|\/\*|\.version|\.target|\.address_size)/.test(text)) throw invalid('neither a fat binary, an ELF image nor PTX text');
  return ptxGlobalBytes(text);
}
