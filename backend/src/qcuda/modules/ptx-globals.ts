// The device memory a PTX module's variables in the .global and .const
// state spaces take, read from the text exactly, or the image is refused.
//
// Why exactly: this is what the VM's quota counts for a module before the
// driver sees it, and what it keeps counting after the load (the load's own
// measurement is a free-memory delta that another process's free can
// cancel). A regex over the text was evaded by a second declarator, a
// comment between tokens, a #define'd or computed size (security review 2,
// M3). So the text is tokenized as the driver reads it (comments, strings,
// a token per directive), every .global or .const in it that is not an
// instruction's state space must begin a declaration this parser reads
// whole, and whatever could make the driver see something else is refused:
// preprocessor lines, line continuations, sizes that are not integer
// literals, unknown types, bytes outside ASCII. ptxas (CUDA 13) and the
// driver's JIT (H200, driver 580) refuse #define and computed sizes anyway;
// nvcc, NVRTC and Triton emit none of these. The driver took the memory of
// a second declarator, of one after a comment, after `.extern .func ld` and
// glued to `.target sm_90` (256 MiB each, measured on the H200); what else
// was checked against ptxas is in the comments below.
import { CudaErr, CudaError } from '../cuda-error';

const refuse = (why: string) =>
  new CudaError(CudaErr.InvalidPtx, `module image: PTX whose device memory cannot be counted exactly: ${why}`);

/** Bytes per element of the types a .global or .const variable may have (PTX ISA 8.x; the opaque refs as a handle's 16). */
const TYPE_BYTES: Record<string, bigint> = {
  '.b8': 1n,
  '.u8': 1n,
  '.s8': 1n,
  '.pred': 1n,
  '.b16': 2n,
  '.u16': 2n,
  '.s16': 2n,
  '.f16': 2n,
  '.bf16': 2n,
  '.b32': 4n,
  '.u32': 4n,
  '.s32': 4n,
  '.f32': 4n,
  '.f16x2': 4n,
  '.bf16x2': 4n,
  '.tf32': 4n,
  '.b64': 8n,
  '.u64': 8n,
  '.s64': 8n,
  '.f64': 8n,
  '.b128': 16n,
  '.texref': 16n,
  '.samplerref': 16n,
  '.surfref': 16n,
};

const VECTOR = /^\.v(2|4|8)$/;
/** PTX identifiers: a letter, or _ $ % and at least one more character. */
const NAME = /^(?:[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+)$/;
/** Integer literals: hex, binary, octal, decimal, with an optional U. */
const INTEGER = /^(?:0[xX]([0-9a-fA-F]+)|0[bB]([01]+)|0([0-7]*)|([1-9][0-9]*))U?$/;
/** Linkage directives that may stand before a state space. */
const LINKAGE = new Set(['.extern', '.visible', '.weak', '.common']);

/**
 * One token at a time: whitespace and comments are skipped. Directives
 * are a token each, also where they follow a word or each other without a
 * space (sm_90.global, ld.global.u32, .visible.global), as the driver
 * reads them: `.target sm_90.global .b8 x[1024];` declares x (ptxas, CUDA
 * 13); a directive keeps its `::` parts (.shared::cluster). A line comment
 * ends at any line break the driver might take as one, so that it never
 * hides more than the driver's does.
 */
const TOKEN =
  /(?:[ \t\n\r\v\f]+|\/\/[^\n\r\v\f]*|\/\*[^]*?\*\/)*(?:("[^"\\\n\r]*")|(\.[A-Za-z0-9_$%]*(?:::[A-Za-z0-9_$%]+)*|[A-Za-z0-9_$%]+)|([^]))?/y;

class Lexer {
  #at = 0;
  #back: string | undefined;

  constructor(readonly text: string) {}

  /** The next token, or undefined at the end. */
  next(): string | undefined {
    if (this.#back !== undefined) {
      const t = this.#back;
      this.#back = undefined;
      return t;
    }
    TOKEN.lastIndex = this.#at;
    const m = TOKEN.exec(this.text)!;
    this.#at = TOKEN.lastIndex;
    if (m[2] !== undefined) return m[2];
    if (m[1] !== undefined) {
      if (/\.(global|const)\b/.test(m[1])) throw refuse(`a string naming a state space: ${m[1].slice(0, 40)}`);
      return m[1];
    }
    const t = m[3];
    if (t === undefined) return undefined; // the end (or only whitespace and comments before it)
    if (t === '/' && this.text[this.#at] === '*') throw refuse('a /* comment that does not end');
    if (t === '#') throw refuse('a preprocessor directive (#)');
    if (t === '\\') throw refuse('a backslash outside a string (a line continuation)');
    if (t === '"') throw refuse('a string that does not end on its line, or with a backslash in it');
    const c = t.charCodeAt(0);
    if (c < 0x20 || c > 0x7e) throw refuse(`the byte 0x${c.toString(16)} outside comments and strings`);
    return t;
  }

  /** Gives t back: the next next() returns it. */
  unread(t: string): void {
    this.#back = t;
  }

  /** The next token, which must exist. */
  take(inWhat: string): string {
    const t = this.next();
    if (t === undefined) throw refuse(`the text ends inside ${inWhat}`);
    return t;
  }
}

function integer(t: string, what: string): bigint {
  const m = INTEGER.exec(t);
  if (!m) throw refuse(`${what} '${t}' is not an integer literal`);
  if (m[1] !== undefined) return BigInt(`0x${m[1]}`);
  if (m[2] !== undefined) return BigInt(`0b${m[2]}`);
  if (m[3] !== undefined) return m[3] === '' ? 0n : BigInt(`0o${m[3]}`);
  return BigInt(m[4]);
}

/**
 * Bytes of device memory the .global and .const variables of this PTX text
 * take; throws cudaErrorInvalidPtx where it cannot say exactly.
 *
 * A .global or .const token is one of three things: a kernel parameter's
 * pointee (after .ptr), an instruction's state space (after its opcode and
 * other modifiers, the opcode beginning a statement: ld.global, ld .global),
 * or a declaration, read whole. A word that does not begin a statement is
 * no opcode: after `.extern .func ld` a `.global` declares a variable
 * (ptxas, CUDA 13). Statements begin after ; { } and labels, after a
 * predicate guard (@p, @!p), and after the directives that end without a
 * ; (.loc, .section's body), which are read here for that reason.
 */
export function ptxGlobalBytes(text: string): bigint {
  const lx = new Lexer(text);
  let total = 0n;
  let prev: string | undefined;
  /** The next token begins a statement. */
  let start = true;
  /** The opcode of the instruction whose modifiers these are. */
  let opcode: string | undefined;
  let extern = false;
  let guard = false;
  for (let t = lx.next(); t !== undefined; prev = t, t = lx.next()) {
    const isExtern = extern;
    extern = t === '.extern' || (extern && LINKAGE.has(t));
    if (t.startsWith('.') && t.length > 1) {
      if (t === '.global' || t === '.const') {
        if (prev === '.ptr' || opcode !== undefined) continue;
        const bytes = declaration(lx, t);
        if (!isExtern) total += bytes;
        [start, opcode] = [true, undefined];
      } else if (t === '.loc') {
        readLoc(lx);
        [start, opcode] = [true, undefined];
      } else if (t === '.section') {
        skipSection(lx);
        [start, opcode] = [true, undefined];
      } else if (opcode === undefined) {
        start = false;
      }
    } else if (t === ';' || t === '{' || t === '}' || t === ':') {
      [start, opcode, guard] = [true, undefined, false];
    } else if (t === '@') {
      [guard, start, opcode] = [true, false, undefined];
    } else if (guard && t !== '!') {
      [guard, start, opcode] = [false, true, undefined]; // the predicate: the instruction follows
    } else if (!guard) {
      opcode = start && /^[a-z]/.test(t) ? t : undefined;
      start = false;
    }
  }
  return total;
}

/** .loc file line column [, function_name label [+ offset]] [, inlined_at file line column]: no ; ends it. */
function readLoc(lx: Lexer): void {
  const what = 'a .loc directive';
  for (let i = 0; i < 3; i++) integer(lx.take(what), '.loc');
  for (let t = lx.next(); t !== undefined; t = lx.next()) {
    if (t !== ',') return lx.unread(t);
    const clause = lx.take(what);
    if (clause === 'function_name') {
      const label = lx.take(what);
      if (!NAME.test(label)) throw refuse(`.loc function_name '${label}'`);
      const plus = lx.take(what);
      if (plus === '+') integer(lx.take(what), '.loc function_name offset');
      else lx.unread(plus);
    } else if (clause === 'inlined_at') {
      for (let i = 0; i < 3; i++) integer(lx.take(what), '.loc inlined_at');
    } else {
      throw refuse(`.loc followed by ', ${clause}'`);
    }
  }
}

/** .section name { data }: debug information (labels and .b8/.b32/.b64 data), which holds no variable. */
function skipSection(lx: Lexer): void {
  const what = 'a .section';
  const name = lx.take(what);
  if (!name.startsWith('.')) throw refuse(`.section named '${name}'`);
  if (lx.take(what) !== '{') throw refuse(`.section ${name} without its {`);
  for (let t = lx.take(what); t !== '}'; t = lx.take(what)) {
    if (t === '{' || t === ';' || t === '.global' || t === '.const' || t === '.section') throw refuse(`'${t}' inside .section ${name}`);
  }
}

/**
 * The rest of a declaration after its state space, up to its `;`:
 * [.attribute(...)] [.align N] [.vN] .type, then declarators
 * name[<N>][[d]...][= initializer], separated by commas. Each variable
 * counts its bytes and the padding its alignment may put before it
 * (align - 1): ptxas laid out three 1-byte variables of .align 1 MiB in a
 * .nv.global of 2 MiB + 1.
 */
function declaration(lx: Lexer, space: string): bigint {
  const what = `a ${space} declaration`;
  let vector = 1n;
  let align: bigint | undefined;
  let elem: bigint | undefined;
  while (elem === undefined) {
    const t = lx.take(what);
    if (t === '.attribute') skipAttribute(lx, what);
    else if (t === '.align') align = integer(lx.take(what), `${space} .align`);
    else if (VECTOR.test(t)) vector = BigInt(t.slice(2));
    else if (TYPE_BYTES[t] !== undefined) elem = TYPE_BYTES[t];
    else throw refuse(`${space} followed by '${t}'`);
  }
  const padding = (align ?? elem * vector) > 0n ? (align ?? elem * vector) - 1n : 0n;
  let total = 0n;
  for (;;) {
    const name = lx.take(what);
    if (!NAME.test(name)) throw refuse(`${space} variable named '${name}'`);
    let vars = 1n;
    let t = lx.take(what);
    if (t === '<') {
      // name<N>: N variables name0..name(N-1)
      vars = integer(lx.take(what), `${space} ${name}<N>`);
      if (lx.take(what) !== '>') throw refuse(`${space} ${name}<N> not closed`);
      t = lx.take(what);
    }
    let count = 1n;
    let unsized = false;
    for (let dim = 0; t === '['; dim++) {
      const d = lx.take(what);
      if (d === ']') {
        if (dim > 0) throw refuse(`${space} ${name}: only the first dimension may be left out`);
        unsized = true;
      } else {
        count *= integer(d, `${space} ${name}'s size`);
        if (lx.take(what) !== ']') throw refuse(`${space} ${name}: a size that is more than an integer literal`);
      }
      t = lx.take(what);
    }
    if (t === '=') {
      const { elements, end } = initializer(lx, what);
      if (unsized) count *= elements;
      t = end;
    } else if (unsized) {
      count = 0n; // an extern's: the driver refuses any other ("incomplete type")
    }
    total += vars * (elem * vector * count + padding);
    if (t === ';') return total;
    if (t !== ',') throw refuse(`${space} ${name} followed by '${t}'`);
  }
}

/**
 * Skips an initializer up to the , or ; that ends it; elements: those
 * between its outer braces (1 for a scalar), for an array declared
 * without a size (the driver sizes it so; never fewer are counted).
 */
function initializer(lx: Lexer, what: string): { elements: bigint; end: string } {
  let braces = 0;
  let parens = 0;
  let elements = 1n;
  let first = true;
  for (;;) {
    const t = lx.take(what);
    if (t === '{') {
      if (parens > 0 || (braces === 0 && !first)) throw refuse('braces inside parentheses, or after the start of an initializer');
      braces++;
    } else if (t === '}') {
      if (--braces < 0) throw refuse("an unbalanced '}' in an initializer");
    } else if (t === '(') {
      parens++;
    } else if (t === ')') {
      if (--parens < 0) throw refuse("an unbalanced ')' in an initializer");
    } else if (t === ';' || t === ',') {
      if (braces === 0 && parens === 0) return { elements, end: t };
      if (t === ';') throw refuse('a ; inside an initializer');
      if (braces === 1 && parens === 0) elements++;
    } else if (t === '.global' || t === '.const') {
      throw refuse(`${t} inside an initializer`);
    }
    first = false;
  }
}

/** Skips .attribute(...) (.managed, .unified(...)); it may not hold a statement's end or a state space. */
function skipAttribute(lx: Lexer, what: string): void {
  if (lx.take(what) !== '(') throw refuse(".attribute without its '('");
  for (let depth = 1; depth > 0;) {
    const t = lx.take(what);
    if (t === '(') depth++;
    else if (t === ')') depth--;
    else if (t === ';' || t === '{' || t === '}' || t === '.global' || t === '.const') throw refuse(`'${t}' inside .attribute(...)`);
  }
}
