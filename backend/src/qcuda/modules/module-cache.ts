// Module images by content, per VM (per backend): the next process of a VM
// that loads an image already loaded once (cuBLAS registers ~3,000 fat
// binaries; every process that uses it loads the same ones) names it by its
// SHA-256 (MODULE_FIND) instead of sending it again. The key is computed
// here from the bytes that were uploaded and checked, never taken from the
// guest: a guest can only ask for what the VM itself sent before. Bounded in
// bytes (moduleCache); the least recently used images go first.
import { createHash } from 'node:crypto';
import { IMAGE_PADDING } from './module-image';

/**
 * Where a VM's module images are found by content and kept: a ModuleCache
 * in the process that holds it (the backend), or that process asked over a
 * channel (a session's worker serving its own queue: remote-modules.ts).
 */
export interface ModuleStore {
  /** The image (IMAGE_PADDING zero bytes follow it in its buffer; never to be written), or undefined. */
  find(sha256: Uint8Array, size: bigint): Uint8Array | undefined | Promise<Uint8Array | undefined>;
  /** Keeps image (checked, complete) under its own SHA-256, if it fits. */
  add(image: Uint8Array): void;
}

export class ModuleCache implements ModuleStore {
  readonly #limit: bigint;
  /** Insertion order is use order: the first entry is the least recently used. */
  readonly #images = new Map<string, Uint8Array>();
  #bytes = 0n;

  /** limit: bytes of images held at most (0: nothing is cached). */
  constructor(limit: bigint) {
    this.#limit = limit;
  }

  static key(sha256: Uint8Array, size: bigint): string {
    return `${Buffer.from(sha256).toString('hex')}:${size}`;
  }

  /** The cached image (IMAGE_PADDING zero bytes follow it in its buffer; never to be written), or undefined. */
  find(sha256: Uint8Array, size: bigint): Uint8Array | undefined {
    return this.#touch(ModuleCache.key(sha256, size));
  }

  /** Marks the image under k the most recently used (re-inserted last) and returns it. */
  #touch(k: string): Uint8Array | undefined {
    const image = this.#images.get(k);
    if (image !== undefined) {
      this.#images.delete(k);
      this.#images.set(k, image);
    }
    return image;
  }

  /** Keeps a copy of image (checked, complete) under its own SHA-256; evicts the least recently used past the bound. */
  add(image: Uint8Array): void {
    const size = BigInt(image.length);
    if (size > this.#limit) return;
    const k = ModuleCache.key(createHash('sha256').update(image).digest(), size);
    if (this.#touch(k) !== undefined) return;
    const copy = new Uint8Array(image.length + IMAGE_PADDING).subarray(0, image.length);
    copy.set(image);
    this.#images.set(k, copy);
    this.#bytes += size;
    for (const [old, img] of this.#images) {
      if (this.#bytes <= this.#limit) break;
      this.#images.delete(old);
      this.#bytes -= BigInt(img.length);
    }
  }

  get bytes(): bigint {
    return this.#bytes;
  }

  get count(): number {
    return this.#images.size;
  }
}
