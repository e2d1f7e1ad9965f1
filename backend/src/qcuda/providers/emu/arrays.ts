// An emu context's CUDA arrays, mipmapped arrays, and texture and surface
// objects (records: nothing samples them here). Arrays are allocations of
// the device memory, reachable only through their ids; refs are ids, so
// they cross to a session's worker and back.
import { CudaErr, CudaError } from '../../cuda-error';
import { elementSize, levelDesc } from '../../cuda-formats';
import type { ArrayDesc, ArrayRef, DevPtr, MipmapRef, Place, Pos, TexResource } from '../../provider';
import type { EmuMemory, MemoryOwner } from './memory';

/** An array here: dense rows of width * elem bytes, height rows a slice. */
interface HostArray {
  base: DevPtr;
  bytes: Uint8Array;
  desc: ArrayDesc;
  elem: bigint;
}

/**
 * Array ids and texture and surface object values, unique in the process
 * (not per context): a session's refs then name one context's object
 * whatever its devices (migration/ finds each one's context so).
 */
let nextArray = 1;
let nextObject = 0x7e0000001n;

export class EmuArrays {
  readonly #arrays = new Map<number, HostArray>();
  /** Mipmapped arrays: their levels' array ids. */
  readonly #mipmaps = new Map<number, number[]>();
  /** Texture and surface objects. */
  readonly #objects = new Map<bigint, 'texture' | 'surface'>();

  constructor(
    private readonly memory: EmuMemory,
    private readonly owner: MemoryOwner,
  ) {}

  #array(a: ArrayRef): HostArray {
    const x = typeof a === 'number' ? this.#arrays.get(a) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidResourceHandle, `not an array of this context: ${String(a)}`);
    return x;
  }

  /** Views of one row of a box: width bytes at pos + (0, y, z) of a place. */
  row(place: Place, pos: Pos, width: bigint, y: bigint, z: bigint): Uint8Array[] {
    if ('array' in place) {
      const a = this.#array(place.array);
      const rowBytes = a.desc.width * a.elem;
      const h = a.desc.height === 0n ? 1n : a.desc.height;
      const off = ((pos.z + z) * h + pos.y + y) * rowBytes + pos.x;
      if (pos.x + width > rowBytes || off + width > BigInt(a.bytes.length))
        throw new CudaError(CudaErr.InvalidValue, 'box outside the array');
      return [a.bytes.subarray(Number(off), Number(off + width))];
    }
    return this.memory.views(place.ptr + (pos.z + z) * place.pitch * place.rows + (pos.y + y) * place.pitch + pos.x, width, this.owner);
  }

  create(desc: ArrayDesc): ArrayRef {
    const elem = elementSize(desc.format, desc.channels);
    const size = desc.width * elem * (desc.height === 0n ? 1n : desc.height) * (desc.depth === 0n ? 1n : desc.depth);
    const base = this.memory.allocate(size, this.owner);
    const id = nextArray++;
    this.#arrays.set(id, { base, bytes: this.memory.views(base, size, this.owner)[0], desc, elem });
    return id;
  }

  destroy(a: ArrayRef): void {
    const x = this.#array(a);
    this.#arrays.delete(a as number);
    this.memory.release(x.base, this.owner);
  }

  mipmapCreate(desc: ArrayDesc, levels: number): MipmapRef {
    return this.#newMipmap(levels, (l) => this.create(levelDesc(desc, l)));
  }

  /** A mipmapped array of levels made by make(level); the ones made are destroyed if one fails. */
  #newMipmap(levels: number, make: (level: number) => ArrayRef): MipmapRef {
    const ids: number[] = [];
    try {
      for (let l = 0; l < levels; l++) ids.push(make(l) as number);
    } catch (e) {
      for (const id of ids) this.destroy(id);
      throw e;
    }
    const id = nextArray++;
    this.#mipmaps.set(id, ids);
    return id;
  }

  #mipmap(m: MipmapRef): number[] {
    const x = typeof m === 'number' ? this.#mipmaps.get(m) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidResourceHandle, `not a mipmapped array of this context: ${String(m)}`);
    return x;
  }

  mipmapLevel(m: MipmapRef, level: number): ArrayRef {
    const ids = this.#mipmap(m);
    if (level >= ids.length) throw new CudaError(CudaErr.InvalidValue, `level ${level} of ${ids.length}`);
    return ids[level];
  }

  mipmapDestroy(m: MipmapRef): void {
    const ids = this.#mipmap(m);
    this.#mipmaps.delete(m as number);
    for (const id of ids) this.destroy(id);
  }

  texCreate(res: TexResource): bigint {
    if (res.kind === 'array') this.#array(res.array);
    if (res.kind === 'mipmap') this.#mipmap(res.mipmap);
    return this.#addObject('texture');
  }

  surfCreate(a: ArrayRef): bigint {
    this.#array(a);
    return this.#addObject('surface');
  }

  #addObject(kind: 'texture' | 'surface'): bigint {
    const id = nextObject++;
    this.#objects.set(id, kind);
    return id;
  }

  objectDestroy(id: bigint, kind: 'texture' | 'surface'): void {
    if (this.#objects.get(id) !== kind) throw new CudaError(CudaErr.InvalidValue, `not a ${kind} object`);
    this.#objects.delete(id);
  }

  /** Array a's bytes, rows dense, and where they lie in device memory (migration/). */
  bytesOf(a: ArrayRef): Uint8Array {
    return this.#array(a).bytes;
  }

  baseOf(a: ArrayRef): DevPtr {
    return this.#array(a).base;
  }

  /** A migrated mipmapped array: its levels' bytes at their addresses (levelDesc's shapes). */
  adoptMipmap(desc: ArrayDesc, levels: readonly { base: DevPtr; bytes: Uint8Array }[]): MipmapRef {
    return this.#newMipmap(levels.length, (l) => this.adopt(levelDesc(desc, l), levels[l].base, levels[l].bytes));
  }

  /** A migrated array: its bytes at its address at the source (another allocation's there otherwise). */
  adopt(desc: ArrayDesc, base: DevPtr, bytes: Uint8Array): ArrayRef {
    const elem = elementSize(desc.format, desc.channels);
    const size = desc.width * elem * (desc.height === 0n ? 1n : desc.height) * (desc.depth === 0n ? 1n : desc.depth);
    if (size !== BigInt(bytes.length))
      throw new CudaError(CudaErr.InvalidValue, `an array of ${bytes.length} bytes whose shape makes ${size}`);
    this.memory.adoptAllocation(base, bytes, this.owner);
    const id = nextArray++;
    this.#arrays.set(id, { base, bytes, desc, elem });
    return id;
  }

  /** Texture and surface objects, by value. */
  objects(): [bigint, 'texture' | 'surface'][] {
    return [...this.#objects];
  }

  /** A migrated texture or surface object: its value as at its source (the guest holds it). */
  adoptObject(id: bigint, kind: 'texture' | 'surface'): void {
    if (this.#objects.has(id)) throw new CudaError(CudaErr.InvalidValue, `${kind} object 0x${id.toString(16)} is taken`);
    this.#objects.set(id, kind);
    if (id >= nextObject) nextObject = id + 1n;
  }

  /** The context is gone: its memory went with it (EmuMemory.releaseAll). */
  clear(): void {
    this.#arrays.clear();
    this.#mipmaps.clear();
    this.#objects.clear();
  }
}
