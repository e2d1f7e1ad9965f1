// The VM's module images as a queue owner sees them (owned-queue.ts): the
// cache is the backend's (module-cache.ts), one per VM, so a process whose
// session is served by its own worker finds the images an earlier process
// of the VM loaded, and leaves its own there for the next, as a session the
// backend serves does. An image goes over the worker's channel either way.
import type { ModuleStore } from '../modules/module-cache';
import { IMAGE_PADDING } from '../modules/module-image';

export type ModuleAsk = (id: number, sha256: Uint8Array, size: bigint) => void;

export class RemoteModules implements ModuleStore {
  readonly #waiting = new Map<number, { size: bigint; resolve: (image: Uint8Array | undefined) => void }>();
  #nextId = 1;

  /** ask: sends the backend a module-find; add: sends it a module-add. */
  constructor(
    readonly ask: ModuleAsk,
    readonly send: (image: Uint8Array) => void,
  ) {}

  find(sha256: Uint8Array, size: bigint): Promise<Uint8Array | undefined> {
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#waiting.set(id, { size, resolve });
      this.ask(id, sha256, size);
    });
  }

  /** The backend's answer to find `id`: the image, padded as the cache's are, or undefined (not cached, or not of that size). */
  answer(id: number, image: Uint8Array | undefined): void {
    const w = this.#waiting.get(id);
    if (!w) return;
    this.#waiting.delete(id);
    if (image === undefined || BigInt(image.length) !== w.size) return w.resolve(undefined);
    const padded = new Uint8Array(image.length + IMAGE_PADDING).subarray(0, image.length);
    padded.set(image);
    w.resolve(padded);
  }

  add(image: Uint8Array): void {
    this.send(image);
  }

  /** The channel closed: nothing will answer (the process is ending). */
  close(): void {
    for (const w of this.#waiting.values()) w.resolve(undefined);
    this.#waiting.clear();
  }
}
