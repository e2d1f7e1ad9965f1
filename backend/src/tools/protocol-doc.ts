// docs/protocol.md: the wire protocol as a reader's reference, written from
// the same declaration as the C header (wire/protocol.ts), so the two cannot
// disagree. `npm run gen` writes it; test/qcuda/proto.test.ts fails when the
// checked-in copy is stale.
import { valueOf } from '../qcuda/wire/gen-c';
import { layoutOf, type StructDecl } from '../qcuda/wire/layout';
import { CALLS, CONSTANTS, STATUSES, STRUCTS, type CallDecl, type ConstantDecl } from '../qcuda/wire/protocol';

/** Text made safe for one table cell. */
function cell(text: string | undefined): string {
  return (text ?? '').replace(/\|/g, '\\|').replace(/\s+/g, ' ').trim();
}

function code(text: string): string {
  return `\`${text}\``;
}

function structLink(name: string): string {
  return `[${code(name)}](#${name})`;
}

const SIDES: Record<CallDecl['side'], string> = {
  device: 'device (the guest kernel driver; no session)',
  backend: "backend (from the session's state)",
  context: "context (the session's CUDA context, in its worker)",
};

/** The short properties of a call, for the summary table. */
function flags(d: CallDecl): string {
  return [
    d.posted ? 'posted' : '',
    d.gpu === 'posts' ? 'GPU work' : '',
    d.syncs ? 'syncs' : '',
    d.endsBatch ? 'ends batch' : '',
    d.unbatched ? 'unbatched' : '',
    d.varArgs ? 'more args' : '',
    d.context ? 'one to one' : '',
    d.ring ? 'ring server' : '',
  ]
    .filter(Boolean)
    .join(', ');
}

function callSummary(): string[] {
  const out = ['| cmd | call | answered by | arguments | output | data | properties |', '|---:|---|---|---|---|---|---|'];
  for (const [name, d] of Object.entries(CALLS) as [string, CallDecl][]) {
    out.push(
      `| ${d.cmd} | [${code(name)}](#${name.toLowerCase()}) | ${d.side} | ${d.args ? structLink(d.args) : ''} | ${d.out ? structLink(d.out) : ''} | ${d.data ? `${d.data} the device` : ''} | ${flags(d)} |`,
    );
  }
  return out;
}

function callSection(name: string, d: CallDecl): string[] {
  const facts: string[] = [`- command ${d.cmd}, answered by the ${SIDES[d.side]}`];
  if (d.args) facts.push(`- arguments: ${structLink(d.args)}${d.varArgs ? ', followed by more argument bytes (checked by the call)' : ''}`);
  if (d.out) facts.push(`- output: ${structLink(d.out)}`);
  if (d.data)
    facts.push(
      `- data: ${d.data === 'to' ? 'to the device (device-readable, after the arguments)' : 'from the device (the last writable bytes)'}`,
    );
  const value = valueOf(d);
  if (value) facts.push(`- reply value: ${value}`);
  if (d.handles) {
    const list = Object.entries(d.handles)
      .map(([f, k]) => `${code(f)} (${k})`)
      .join(', ');
    facts.push(`- handles, looked up in the session's tables: ${list}`);
  }
  if (d.ends) facts.push(`- ends the handle in ${code(d.ends)}: the session forgets it before the provider frees it`);
  if (d.stream)
    facts.push(
      `- runs after the host functions marked before it on ${d.stream === 'all' ? 'every stream' : `the stream in ${code(d.stream)}`}`,
    );
  if (d.event) facts.push(`- waits for the deferred record of the event in ${code(d.event)}`);
  if (d.posted) facts.push('- may be posted: sent later, in a `BATCH` (it enqueues work and never waits for it)');
  if (d.gpu === 'posts') facts.push("- puts work on the GPU: under `--gpu-share` it waits for its VM's turn first");
  if (d.syncs)
    facts.push(
      '- synchronizes: its status is also the first error of posted work since the last such call; it may end a batch (`QCUDA_BATCH_ENDS_SYNC`)',
    );
  if (d.endsBatch)
    facts.push(
      "- does not wait, so it may end a batch (`QCUDA_BATCH_ENDS_QUERY`): its status stays its own, posted work's first failure is the reply's value, kept by the guest for its next synchronizing call",
    );
  if (d.unbatched) facts.push('- sent without flushing posted work first');
  if (d.ring) {
    const r = d.ring;
    const where = r.batchOnly ? 'as an entry of a batch it serves' : 'sent on its own' + (d.posted ? ' or in a batch it serves' : '');
    const range = r.range ? `, ${code(r.range[0])} to ${code(r.range[1])} inside one of the session's allocations` : '';
    const most = r.maxData !== undefined ? `, at most ${r.maxData} bytes of data` : '';
    facts.push(
      `- the ring server answers it in C (${code(r.serves)}), ${where}, when it can tell the backend would answer it the same way at once${range}${most} (see [the three routes of a call](architecture.md#the-three-routes-of-a-call))`,
    );
  }
  if (d.context) {
    const c = d.context;
    const flagBits = c.flags
      ? `; flag bits admitted: ${Object.entries(c.flags)
          .map(([f, b]) => `${code(f)} 0x${b.toString(16)}`)
          .join(', ')}`
      : '';
    const run =
      (c.checked ? '; its run checks the arguments first and calls it' : '') +
      (c.driver ? `; the cuda provider's addon method is one call of ${code(`cu${c.driver}`)} (generated)` : '');
    facts.push(`- context method ${code(`${c.method}(${c.params.join(', ')})`)}, result: ${c.result}${flagBits}${run}`);
  }
  return [`### ${name}`, '', ...(d.doc ? [d.doc, ''] : []), ...facts, ''];
}

function constantRow(name: string, c: ConstantDecl): string {
  return `| ${code(name)} | ${code(c.c ?? String(c.value))} | ${cell(c.doc)} |`;
}

function structSection(name: string, s: StructDecl): string[] {
  const l = layoutOf(s);
  const rows = s.fields.map(
    ([f, type, doc], i) => `| ${code(f)} | ${code(type)} | ${l.fields[i].offset} | ${l.fields[i].size} | ${cell(doc)} |`,
  );
  return [
    `### ${name}`,
    '',
    ...(s.doc ? [s.doc, ''] : []),
    `${l.size} bytes.`,
    '',
    '| field | type | offset | bytes | meaning |',
    '|---|---|---:|---:|---|',
    ...rows,
    ...(s.trailer ? ['', `${s.trailer[0].toUpperCase()}${s.trailer.slice(1)}.`] : []),
    '',
  ];
}

/** docs/protocol.md */
export function protocolDoc(): string {
  const calls = Object.entries(CALLS) as [string, CallDecl][];
  const out = [
    '# The virtio-qcuda wire protocol',
    '',
    '<!-- Generated by `npm run gen` from backend/src/qcuda/wire/protocol.ts: do not edit. -->',
    '',
    'Generated by `npm run gen` from `backend/src/qcuda/wire/protocol.ts`, as are the C header',
    "(`guest-driver/include/qcuda_proto.h`) and the guest library's request builders",
    '(`guest-driver/lib/qc_calls.h`). How a request travels: [architecture.md](architecture.md);',
    'how to add a call: [CONTRIBUTING.md](../CONTRIBUTING.md#adding-a-cuda-call).',
    '',
    '## Requests',
    '',
    'All fields are little-endian; every struct has explicit padding and a size that is a',
    'multiple of 8. A request is one descriptor chain:',
    '',
    '- device-readable: [`qcuda_req_hdr`](#qcuda_req_hdr), then `hdr.len` bytes of arguments',
    "  (the call's argument struct), then, for calls that move data to the device,",
    '  `hdr.data_len` bytes of data;',
    "- device-writable: [`qcuda_resp_hdr`](#qcuda_resp_hdr), then room for the call's output",
    '  struct, then, for calls that move data from the device, `hdr.data_len` bytes: the data',
    '  always fills the last `data_len` writable bytes.',
    '',
    'Data is guest user memory, pinned by the driver and passed page by page (no copies). A',
    'transfer larger than one chunk (`QCUDA_CHUNK`) is split by the driver into several',
    'requests that differ only in `data_offset`/`data_len`; the backend applies each chunk at',
    "`data_offset` and they may complete in any order. The reply's status is 0, a",
    '`cudaError_t`, or one of the statuses below.',
    '',
    `## Calls (${calls.length})`,
    '',
    'Properties: *posted*: may be sent later in a `BATCH`; *GPU work*: puts work on the GPU',
    "(under `--gpu-share` it waits for its VM's turn); *syncs*: reports posted work's",
    'errors and may end a batch; *ends batch*: a query that may end a batch without reporting',
    "posted work's errors; *unbatched*: sent without flushing posted work; *more args*:",
    'more argument bytes follow the struct; *one to one*: answered by one method of the',
    "session's provider context.",
    '',
    ...callSummary(),
    '',
    ...calls.flatMap(([name, d]) => callSection(name, d)),
    '## Statuses',
    '',
    'Besides `cudaError_t` values, which pass through unchanged:',
    '',
    '| status | value | meaning |',
    '|---|---|---|',
    ...Object.entries(STATUSES).map(
      ([name, st]) => `| ${code(`QCUDA_ST_${name}`)} | ${code(`0x${st.value.toString(16)}`)} | ${cell('doc' in st ? st.doc : '')} |`,
    ),
    '',
    '## Constants',
    '',
    '| name | value | meaning |',
    '|---|---|---|',
    ...Object.entries(CONSTANTS).map(([name, c]) => constantRow(name, c)),
    '',
    '## Structs',
    '',
    ...Object.entries(STRUCTS).flatMap(([name, s]) => structSection(name, s)),
  ];
  while (out[out.length - 1] === '') out.pop();
  return `${out.join('\n')}\n`;
}
