#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compares two driver-call traces of one program (docs/tracing.md): one over
NVIDIA's libcuda.so.1, one over qcuda's. Names every answer that differs.

  trace-diff.py NATIVE_TRACE QCUDA_TRACE [--all] [--ignore=NAME,...]

Each record is normalized (addresses, thread ids dropped) and keyed by what
was asked: a call by (entry point, inputs), a cuGetProcAddress request by
(name, version, flags), an export table by its UUID, an export-table slot
call by (table, slot) (its six integer arguments are partly whatever was in
the registers, so they are not part of the key). The i-th occurrence of a
key in one trace is compared with the i-th in the other. Exit status 1 if
any answer differs, 2 on bad usage."""

import re
import sys
from collections import Counter, OrderedDict

# Answers that depend on the run, not on the driver: free memory, ids,
# timing and whether work has finished yet; and the GPU's UUID, which qcuda
# gives each VM (each backend) its own (docs/security.md): compare it with
# --ignore= and qcuda's --real-gpu-identity.
DEFAULT_IGNORE = [
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuMemGetInfo",
    "cuMemGetInfo_v2",
    "cuCtxGetId",
    "cuStreamGetId",
    "cuStreamGetId_ptsz",
    "cuEventElapsedTime",
    "cuEventElapsedTime_v2",
    "cuEventQuery",
    "cuStreamQuery",
    "cuStreamQuery_ptsz",
]

ADDRESS = re.compile(r"@0x[0-9a-f]+")


def normalize(token):
    return ADDRESS.sub("@", token)


class Record:
    __slots__ = ("kind", "name", "key", "answer", "line")

    def __init__(self, kind, name, key, answer, line):
        self.kind, self.name, self.key, self.answer, self.line = kind, name, key, answer, line


def parse_line(line):
    """A record of a trace line, or None for comments and enter lines."""
    parts = line.split(" ")
    if len(parts) < 3 or parts[0] not in ("c", "g", "t", "x", "m"):
        return None
    kind, name = parts[0], parts[2]
    rest = parts[3:]
    if "->" in rest:
        i = rest.index("->")
        ins, outs = rest[:i], rest[i + 1 :]
    else:
        ins, outs = rest, []
    ins = [normalize(t) for t in ins]
    outs = [normalize(t) for t in outs]
    if kind == "g":
        # The request; the answer is the result, what it is and the status ("how" is the shim's).
        key = ("gpa", *ins)
        answer = tuple(t for t in outs if not t.startswith("how="))
        return Record(kind, name, key, answer, line)
    if kind == "x":
        key = ("slot", name)
        return Record(kind, name, key, tuple(outs[:1]), line)
    if kind == "t":
        return Record(kind, name, ("table", *ins), tuple(outs), line)
    return Record(kind, name, (name, *ins), tuple(outs), line)


def read_trace(path):
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            r = parse_line(raw.rstrip("\n"))
            if r:
                records.append(r)
    return records


def occurrences(records):
    """(key, i) -> record, for the i-th occurrence of each key, in trace order."""
    seen = Counter()
    out = OrderedDict()
    for r in records:
        out[(r.key, seen[r.key])] = r
        seen[r.key] += 1
    return out


def show_key(key, i):
    head = " ".join(str(k) for k in key)
    return head + (f"  (occurrence {i + 1})" if i else "")


def compare(native, qcuda, ignore, show_all):
    out = []
    a, b = occurrences(native), occurrences(qcuda)
    differ = []
    for k, ra in a.items():
        rb = b.get(k)
        if rb is None or ra.name in ignore:
            continue
        if ra.answer != rb.answer:
            differ.append((k, ra, rb))
    calls = [d for d in differ if d[1].kind in ("c", "m", "t")]
    gpas = [d for d in differ if d[1].kind == "g"]
    slots = [d for d in differ if d[1].kind == "x"]
    for title, rows in (
        ("answers that differ", calls),
        ("cuGetProcAddress requests answered differently", gpas),
        ("export-table slots that return differently", slots),
    ):
        if rows:
            out.append(f"{title}:")
            for (key, i), ra, rb in rows:
                out.append(f"  {show_key(key, i)}")
                out.append(f"    native: {' '.join(ra.answer) or '(nothing)'}")
                out.append(f"    qcuda:  {' '.join(rb.answer) or '(nothing)'}")

    def names(records, kinds):
        return Counter(r.name for r in records if r.kind in kinds)

    na, nb = names(native, "cm"), names(qcuda, "cm")
    only_native = sorted(n for n in na if n not in nb)
    only_qcuda = sorted(n for n in nb if n not in na)
    for title, ns, counts in (
        ("entry points reached only natively", only_native, na),
        ("entry points reached only under qcuda", only_qcuda, nb),
    ):
        if ns:
            out.append(f"{title}:")
            out.extend(f"  {n} ({counts[n]})" for n in ns)
    sa, sb = names(native, "x"), names(qcuda, "x")
    for title, ns, counts in (
        ("export-table slots called only natively", sorted(n for n in sa if n not in sb), sa),
        ("export-table slots called only under qcuda", sorted(n for n in sb if n not in sa), sb),
    ):
        if ns:
            out.append(f"{title}:")
            out.extend(f"  {n} ({counts[n]})" for n in ns)
    # Calls of an entry point both reached whose inputs found no match (a
    # different address inside a struct, a different order): not answers.
    unmatched = Counter(ra.name for k, ra in a.items() if ra.kind == "c" and k not in b and ra.name in nb)
    unmatched.update(rb.name for k, rb in b.items() if rb.kind == "c" and k not in a and rb.name in na)
    if unmatched:
        out.append("calls whose inputs have no match in the other trace (not compared):")
        out.extend(f"  {n} ({c})" for n, c in sorted(unmatched.items()))
    if show_all:
        out.append("every record compared:")
        for k, ra in a.items():
            rb = b.get(k)
            if rb is not None:
                same = "same" if ra.answer == rb.answer else "DIFFERS"
                out.append(f"  {same}: {show_key(*k)} -> {' '.join(ra.answer)} | {' '.join(rb.answer)}")
    n = len(differ)
    ign = ",".join(sorted(ignore)) or "none"
    out.append(f"{n} answers differ, {len(only_native)} entry points only native, {len(only_qcuda)} only qcuda (ignored: {ign})")
    return n, "\n".join(out)


def main(argv):
    paths, show_all, ignore = [], False, set(DEFAULT_IGNORE)
    for a in argv:
        if a == "--all":
            show_all = True
        elif a.startswith("--ignore="):
            ignore = {n for n in a[len("--ignore=") :].split(",") if n}
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            paths.append(a)
    if len(paths) != 2:
        print("usage: trace-diff.py NATIVE_TRACE QCUDA_TRACE [--all] [--ignore=NAME,...]", file=sys.stderr)
        return 2
    n, text = compare(read_trace(paths[0]), read_trace(paths[1]), ignore, show_all)
    print(text)
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
