// Wire structs as data: a struct is a list of typed fields; from it come its
// C declaration (gen-c.ts), its layout (offsets by C's natural alignment, as
// the generated header's explicit padding makes them) and a typed codec. A
// field's TypeScript type follows from its declared type, so a misspelt
// field name is a compile error, not an undefined at run time.

export type Scalar = 'u32' | 'i32' | 'u64';
export type FieldType = Scalar | `u8[${number}]` | `char[${number}]` | `u32[${number}]` | `u64[${number}]`;

/** [name, type, comment for the C header]. */
export type FieldDecl = readonly [name: string, type: FieldType, doc?: string];

export interface StructDecl {
  readonly doc?: string;
  readonly fields: readonly FieldDecl[];
  /** Text after the last field in C (e.g. what follows the struct on the wire). */
  readonly trailer?: string;
}

/** What a field of a type holds once decoded. */
export type ValueOf<T extends FieldType> = T extends 'u64'
  ? bigint
  : T extends 'u32' | 'i32'
    ? number
    : T extends `u32[${number}]`
      ? Uint32Array
      : T extends `u64[${number}]`
        ? BigUint64Array
        : Uint8Array;

/** A decoded struct: one typed property per field. */
export type Fields<S extends StructDecl> = { [F in S['fields'][number] as F[0]]: ValueOf<F[1]> };

/** What encode() takes: any subset of the fields (the rest are 0); char arrays also take strings. */
export type FieldInput<S extends StructDecl> = {
  [F in S['fields'][number] as F[0]]?: F[1] extends `char[${number}]` ? string | Uint8Array : F[1] extends 'u64' ? bigint | number : ValueOf<F[1]>;
};

interface Field {
  name: string;
  kind: 'u32' | 'i32' | 'u64' | 'bytes' | 'u32[]' | 'u64[]';
  offset: number;
  size: number;
  count: number;
}

export interface Layout {
  size: number;
  fields: Field[];
  offsets: Record<string, number>;
}

function parseType(t: FieldType): { kind: Field['kind']; elem: number; count: number } {
  const m = /^(\w+)\[(\d+)\]$/.exec(t);
  if (!m) return t === 'u64' ? { kind: 'u64', elem: 8, count: 1 } : { kind: t as 'u32' | 'i32', elem: 4, count: 1 };
  const count = Number(m[2]);
  if (m[1] === 'u32') return { kind: 'u32[]', elem: 4, count };
  if (m[1] === 'u64') return { kind: 'u64[]', elem: 8, count };
  return { kind: 'bytes', elem: 1, count };
}

export function layoutOf(s: StructDecl): Layout {
  let at = 0;
  let align = 1;
  const out: Field[] = [];
  for (const [name, type] of s.fields) {
    const { kind, elem, count } = parseType(type);
    at = Math.ceil(at / elem) * elem;
    align = Math.max(align, elem);
    out.push({ name, kind, offset: at, size: elem * count, count });
    at += elem * count;
  }
  const size = Math.ceil(at / align) * align;
  return { size, fields: out, offsets: Object.fromEntries(out.map((f) => [f.name, f.offset])) };
}

/** Reads a struct from the start of bytes (which must hold all of it). Arrays are copies. */
export function decodeStruct<S extends StructDecl>(name: string, l: Layout, bytes: Uint8Array): Fields<S> {
  if (bytes.length < l.size) throw new RangeError(`${name}: ${bytes.length} bytes, needs ${l.size}`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, l.size);
  const out: Record<string, unknown> = {};
  for (const f of l.fields) {
    switch (f.kind) {
      case 'u32': out[f.name] = v.getUint32(f.offset, true); break;
      case 'i32': out[f.name] = v.getInt32(f.offset, true); break;
      case 'u64': out[f.name] = v.getBigUint64(f.offset, true); break;
      case 'u32[]': out[f.name] = Uint32Array.from({ length: f.count }, (_, i) => v.getUint32(f.offset + i * 4, true)); break;
      case 'u64[]': out[f.name] = BigUint64Array.from({ length: f.count }, (_, i) => v.getBigUint64(f.offset + i * 8, true)); break;
      default: out[f.name] = bytes.slice(f.offset, f.offset + f.size); break;
    }
  }
  return out as Fields<S>;
}

export function encodeStruct<S extends StructDecl>(l: Layout, values: FieldInput<S>): Uint8Array {
  const bytes = new Uint8Array(l.size);
  const v = new DataView(bytes.buffer);
  const given = values as Record<string, unknown>;
  for (const f of l.fields) {
    const x = given[f.name];
    if (x === undefined) continue;
    switch (f.kind) {
      case 'u32': v.setUint32(f.offset, Number(x) >>> 0, true); break;
      case 'i32': v.setInt32(f.offset, Number(x), true); break;
      case 'u64': v.setBigUint64(f.offset, BigInt(x as number | bigint), true); break;
      case 'u32[]': (x as Uint32Array).forEach((e, i) => i < f.count && v.setUint32(f.offset + i * 4, e, true)); break;
      case 'u64[]': (x as BigUint64Array).forEach((e, i) => i < f.count && v.setBigUint64(f.offset + i * 8, e, true)); break;
      case 'bytes': {
        const b = typeof x === 'string' ? Buffer.from(x) : (x as Uint8Array);
        bytes.set(b.subarray(0, f.count - (typeof x === 'string' ? 1 : 0)), f.offset); // strings stay NUL-terminated
        break;
      }
    }
  }
  return bytes;
}
