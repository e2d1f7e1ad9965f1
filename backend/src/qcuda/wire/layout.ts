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
  [F in S['fields'][number] as F[0]]?: F[1] extends `char[${number}]`
    ? string | Uint8Array
    : F[1] extends 'u64'
      ? bigint | number
      : ValueOf<F[1]>;
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

/**
 * A struct's codec, made once from its layout: straight-line code with one
 * DataView access per field and an object of one fixed shape, instead of a
 * loop over the fields on every call. Every request and reply goes through
 * these, on the guest's side and the backend's, so their cost is part of
 * each call's round trip (a third of the JavaScript time of a synchronize).
 */
interface Codec {
  decode(name: string, bytes: Uint8Array): Record<string, unknown>;
  encode(values: Record<string, unknown>): Uint8Array;
}

const codecs = new WeakMap<Layout, Codec>();

function codecOf(l: Layout): Codec {
  let c = codecs.get(l);
  if (!c) codecs.set(l, (c = compileCodec(l)));
  return c;
}

// What the generated code calls for the fields that are not scalars.
const helpers = {
  // Plain loops: TypedArray.from with a mapping function costs microseconds on the GPU machine (a launch decodes two).
  u32s: (v: DataView, at: number, n: number) => {
    const a = new Uint32Array(n);
    for (let i = 0; i < n; i++) a[i] = v.getUint32(at + i * 4, true);
    return a;
  },
  u64s: (v: DataView, at: number, n: number) => {
    const a = new BigUint64Array(n);
    for (let i = 0; i < n; i++) a[i] = v.getBigUint64(at + i * 8, true);
    return a;
  },
  setU32s: (v: DataView, at: number, n: number, x: Uint32Array) => x.forEach((e, i) => i < n && v.setUint32(at + i * 4, e, true)),
  setU64s: (v: DataView, at: number, n: number, x: BigUint64Array) => x.forEach((e, i) => i < n && v.setBigUint64(at + i * 8, e, true)),
  setBytes: (bytes: Uint8Array, at: number, n: number, x: string | Uint8Array) => {
    const b = typeof x === 'string' ? Buffer.from(x) : x;
    bytes.set(b.subarray(0, n - (typeof x === 'string' ? 1 : 0)), at); // strings stay NUL-terminated
  },
};

function compileCodec(l: Layout): Codec {
  // The names become property names in the generated code: declared here, never from the wire.
  for (const f of l.fields) if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(f.name)) throw new Error(`field name '${f.name}' is not an identifier`);
  const read = l.fields.map((f) => {
    const at = f.offset;
    switch (f.kind) {
      case 'u32':
        return `${f.name}: v.getUint32(${at}, true)`;
      case 'i32':
        return `${f.name}: v.getInt32(${at}, true)`;
      case 'u64':
        return `${f.name}: v.getBigUint64(${at}, true)`;
      case 'u32[]':
        return `${f.name}: h.u32s(v, ${at}, ${f.count})`;
      case 'u64[]':
        return `${f.name}: h.u64s(v, ${at}, ${f.count})`;
      default:
        return `${f.name}: s.slice(${at}, ${at + f.size})`;
    }
  });
  const write = l.fields.map((f) => {
    const at = f.offset;
    const set = {
      u32: `v.setUint32(${at}, Number(x) >>> 0, true)`,
      i32: `v.setInt32(${at}, Number(x), true)`,
      u64: `v.setBigUint64(${at}, BigInt(x), true)`,
      'u32[]': `h.setU32s(v, ${at}, ${f.count}, x)`,
      'u64[]': `h.setU64s(v, ${at}, ${f.count}, x)`,
      bytes: `h.setBytes(s, ${at}, ${f.count}, x)`,
    }[f.kind];
    return `x = values.${f.name}; if (x !== undefined) ${set};`;
  });
  // Each codec works in a scratch buffer of its own with one DataView made
  // here. decode copies the bytes in first, so each field is read from a
  // private copy (guest memory may change meanwhile); encode fills it and
  // returns a copy. A DataView over a new small typed array, or a new
  // ArrayBuffer, costs an allocation outside V8's heap (about 0.3 us on a
  // desktop, several times that on the GPU machine) on every request and
  // reply; a small slice stays on the heap.
  const scratch = new ArrayBuffer(Math.max(l.size, 1));
  const s = new Uint8Array(scratch);
  const v = new DataView(scratch);
  const decode = new Function(
    'h',
    's',
    'v',
    `return function decode(name, bytes) {
    if (bytes.length < ${l.size}) throw new RangeError(name + ': ' + bytes.length + ' bytes, needs ${l.size}');
    s.set(bytes.length === ${l.size} ? bytes : bytes.subarray(0, ${l.size}));
    return { ${read.join(', ')} };
  }`,
  )(helpers, s, v) as Codec['decode'];
  const encode = new Function(
    'h',
    's',
    'v',
    `return function encode(values) {
    s.fill(0);
    let x;
    ${write.join('\n    ')}
    return s.slice(0, ${l.size});
  }`,
  )(helpers, s, v) as Codec['encode'];
  return { decode, encode };
}

/** Reads a struct from the start of bytes (which must hold all of it). Arrays are copies. */
export function decodeStruct<S extends StructDecl>(name: string, l: Layout, bytes: Uint8Array): Fields<S> {
  return codecOf(l).decode(name, bytes) as Fields<S>;
}

export function encodeStruct<S extends StructDecl>(l: Layout, values: FieldInput<S>): Uint8Array {
  return codecOf(l).encode(values as Record<string, unknown>);
}
