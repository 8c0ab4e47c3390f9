#!/usr/bin/env python3
"""Static code map of a CUDA kernel: where its SASS bytes and its local-memory (spill) instructions come from.

    nvcc ... -lineinfo -cubin src/cuda/lat.cu -o x.cubin
    nvdisasm -gi -c x.cubin > x.sass          (nvdisasm / cuobjdump: the CUDA toolkit, or PyPI's
                                                 nvidia-cuda-nvdisasm wheel where the toolkit lacks them)
    dev/cuda/sass_map.py x.sass KERNEL [--by callsite|function|line] [--top N]

    dev/cuda/sass_map.py x.sass KERNEL --ncu SOURCE.csv [--by ...]   (weighted by a run instead: see below)

KERNEL is a substring of the kernel's (mangled) name; the first section that matches is read. Every instruction is
16 bytes on sm_90. With --by function (default) each instruction counts for the source function that holds its
innermost line (functions found by a plain scan of the source files named in the line info: a definition starts
at column 0); --by callsite counts it for the outermost line it is inlined at (in a kernel built from step
functions, that is the step call: what one step kind costs in code); --by line for its innermost line.
LDL/STL columns: local-memory loads and stores (spills and stack), the instructions ptxas -v counts as bytes.

With --ncu, the instructions are weighted by a run of the same build: SOURCE.csv is ncu's source page of that kernel
(`ncu -i REP --page source --csv --print-source sass`, as land_call.sh PART=latsrc writes it), joined instruction by
instruction (the opcodes must agree: build the -lineinfo cubin from the same sources and flags); the table then gives
each key's share of the warp-stall samples and of the instructions executed (2026-12-07: GPT q8 / bf16 B1 frames).

Static, not executed: a byte counts once whether it runs once per frame or never. The hot code of a frame is
measured by ncu's SourceCounters (dev/cuda/lat_iter.sh lines); this says where the image's bytes and spills are,
here, without a GPU.
"""
import collections
import os
import re
import signal
import sys

LOC = re.compile(r'//## File "([^"]+)", line (\d+)(.*)$')
INS = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)')
DEF = re.compile(r'^(?:template\s*<[^>]*>\s*)?(?:extern "C" )?(?:static |__device__ |__global__ |__host__ |inline |'
                 r'__forceinline__ |__noinline__ |__launch_bounds__\([^)]*\) |const |unsigned |struct )*'
                 r'[\w:<>,\s\*&]*?\b(\w+)\s*\(')


def functions(path, cache={}):
    """[(start line, name)] of the top-level definitions in a source file, sorted"""
    if path in cache:
        return cache[path]
    defs = []
    try:
        with open(path) as f:
            lines = f.read().split('\n')
    except OSError:
        lines = []
    for i, ln in enumerate(lines, 1):
        if not ln or ln[0] in ' \t#/}{*' or ln.startswith('typedef') or ln.endswith(';'):
            continue
        ln = re.sub(r'__launch_bounds__\([^)]*\)\s*', '', ln)
        if '(' not in ln and i < len(lines):  # the name on the next line (template <...> / __global__ void ...)
            ln = ln + ' ' + re.sub(r'__launch_bounds__\([^)]*\)\s*', '', lines[i].strip())
        m = DEF.match(ln)
        if m and m.group(1) not in ('if', 'for', 'while', 'switch', 'return', 'sizeof'):
            defs.append((i, m.group(1)))
    cache[path] = defs
    return defs


def func_at(path, line):
    name = '?'
    for start, n in functions(path):
        if start > line:
            break
        name = n
    return name


def ncu_rows(path):
    """[(opcode, stall samples, warp instructions executed)] of ncu's source page (SASS view), in address order"""
    import csv
    rows, hdr = [], None
    with open(path) as f:
        for r in csv.reader(f):
            if r and r[0] == 'Address':
                hdr = {name: i for i, name in enumerate(r)}
                continue
            if hdr and r and r[0].startswith('0x'):
                src = r[hdr['Source']].split()
                op = src[1] if src and src[0].startswith('@') else (src[0] if src else '?')
                num = lambda name: int(float(r[hdr[name]].replace(',', '') or 0)) if name in hdr else 0
                rows.append((op, num('Warp Stall Sampling (All Samples)'), num('Instructions Executed')))
    return rows


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    sass, kern = argv[1], argv[2]
    by, top, ncu = 'function', 40, None
    i = 3
    while i < len(argv):
        if argv[i] == '--by':
            by, i = argv[i + 1], i + 2
        elif argv[i] == '--top':
            top, i = int(argv[i + 1]), i + 2
        elif argv[i] == '--ncu':
            ncu, i = ncu_rows(argv[i + 1]), i + 2
        else:
            sys.exit('sass_map: unknown argument ' + argv[i])
    if by not in ('function', 'callsite', 'line'):
        sys.exit('sass_map: --by function, callsite or line')
    count = collections.Counter()
    samples = collections.Counter()
    executed = collections.Counter()
    ldl = collections.Counter()
    stl = collections.Counter()
    inside = False
    key = '(no line info)'
    chain, block_open = [], False
    total = 0
    with open(sass) as f:
        for ln in f:
            if ln.startswith('//---') and '.text.' in ln:
                if inside:
                    break
                inside = kern in ln
                continue
            if not inside:
                continue
            m = LOC.search(ln)
            if m:  # a block of these lines before an instruction: its inline chain, innermost first
                if not block_open:
                    chain, block_open = [], True
                chain.append((m.group(1), int(m.group(2))))
                continue
            if block_open and chain:
                block_open = False
                (path, line), (po, lo) = chain[0], chain[-1]
                base = os.path.basename(path)
                if by == 'line':
                    key = '%s:%d %s' % (base, line, func_at(path, line))
                elif by == 'function':
                    key = '%s %s' % (base, func_at(path, line))
                else:
                    key = '%s:%d %s' % (os.path.basename(po), lo, func_at(po, lo))
            m = INS.search(ln)
            if m:
                op = m.group(2)
                if ncu is not None:
                    if total >= len(ncu) or ncu[total][0] != op:
                        sys.exit('sass_map: instruction %d is %s here, %s in the ncu page: not the same build' %
                                 (total, op, ncu[total][0] if total < len(ncu) else 'missing'))
                    samples[key] += ncu[total][1]
                    executed[key] += ncu[total][2]
                count[key] += 1
                total += 1
                if op.startswith('LDL'):
                    ldl[key] += 1
                elif op.startswith('STL'):
                    stl[key] += 1
    if not total:
        sys.exit('sass_map: no instructions of a kernel matching %r in %s' % (kern, sass))
    print('%s: %d instructions, %.1f KB; LDL %d, STL %d' % (kern, total, total * 16 / 1024, sum(ldl.values()),
                                                         sum(stl.values())))
    if ncu is not None:
        if total != len(ncu):
            sys.exit('sass_map: %d instructions here, %d in the ncu page: not the same build' % (total, len(ncu)))
        ts, te = max(1, sum(samples.values())), max(1, sum(executed.values()))
        print('%d stall samples, %d warp instructions executed' % (ts, te))
        print('| %s | stall samples | executed | KB |' % by)
        print('|---|---:|---:|---:|')
        for k, n in samples.most_common(top):
            print('| %s | %.1f%% | %.1f%% | %.2f |' % (k, 100.0 * n / ts, 100.0 * executed[k] / te, count[k] * 16 / 1024))
        return
    print('| %s | KB | share | LDL | STL |' % by)
    print('|---|---:|---:|---:|---:|')
    for k, n in count.most_common(top):
        print('| %s | %.2f | %.1f%% | %d | %d |' % (k, n * 16 / 1024, 100.0 * n / total, ldl[k], stl[k]))
    rest = total - sum(n for _, n in count.most_common(top))
    if rest:
        print('| (the rest, %d keys) | %.2f | %.1f%% | | |' % (len(count) - top, rest * 16 / 1024, 100.0 * rest / total))


if __name__ == '__main__':
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    main(sys.argv)
