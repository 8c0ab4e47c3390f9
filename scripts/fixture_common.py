"""fixture_common.py -- what the fixture scripts share (make_fixtures.py, make_fixtures_families.py,
make_fixtures_qwen3tts.py): their command line and determinism settings, the versions line and the rows of
tests/fixtures/MANIFEST.txt. Imports torch/transformers/safetensors only inside the functions, so it works in each
script's own venv (qwen-tts pins an older transformers)."""
import argparse
import json
import os
import sys

import numpy as np


def start(doc, torch_settings=True):
    """Parse --out, create it, and (torch_settings: the PyTorch scripts) make torch deterministic and transformers
    quiet; returns the parsed args."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="output directory (default tests/fixtures)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if torch_settings:
        import torch
        import transformers

        torch.use_deterministic_algorithms(True)
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    return args


def versions():
    import safetensors
    import torch
    import transformers

    return (f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"safetensors {safetensors.__version__}, numpy {np.__version__}")


def manifest_rows(outdir, log):
    """One 'file | bytes | shape dtype | how' row per (file, description) of log."""
    rows = []
    for fn, desc in log:
        path = os.path.join(outdir, fn)
        if fn.endswith(".npy"):
            a = np.load(path)
            sd = f"{list(a.shape)} {a.dtype}"
        elif fn.endswith(".safetensors"):  # the header's entries, read without torch (the MLX venv has none)
            with open(path, "rb") as f:
                head = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            sd = f"safetensors, {len([k for k in head if k != '__metadata__'])} tensors"
        else:
            sd = "json"
        rows.append(f"{fn} | {os.path.getsize(path)} | {sd} | {desc}")
    return rows


def report(outdir, log, vers):
    total = sum(os.path.getsize(os.path.join(outdir, fn)) for fn, _ in log)
    print(f"total {total} bytes in {len(log)} files; {vers}")


SECTION_MARK = "# ---- section written by "


def write_manifest_section(outdir, script, lines):
    """Replace `script`'s section of outdir/MANIFEST.txt (the lines after its SECTION_MARK header) with `lines`,
    keeping every other script's section."""
    section = SECTION_MARK + f"{script} (replaced on each run; do not edit by hand)"
    mpath = os.path.join(outdir, "MANIFEST.txt")
    old = open(mpath).read() if os.path.exists(mpath) else ""
    parts = old.split("\n" + SECTION_MARK)
    kept = [parts[0].rstrip("\n")] + ["\n" + (SECTION_MARK + p).rstrip("\n") for p in parts[1:]
                                       if not (SECTION_MARK + p).startswith(section)]
    head = "\n".join(k for k in kept if k.strip())
    with open(mpath, "w") as f:
        f.write((head + "\n\n" if head else "") + "\n".join([section] + lines) + "\n")


def resample_for_gaps(hid, rng, row_gap, gap_rel, tries=200):
    """Redraw row r of hid (N(0,1), in place) until row_gap(r) -- its smallest greedy gap (top-1 minus top-2 logit,
    relative to max|logit|) -- exceeds gap_rel, so that greedy codes do not hinge on rounding. Returns the gaps."""
    gaps = []
    for r in range(hid.shape[0]):
        for _ in range(tries):
            gap = row_gap(r)
            if gap > gap_rel:
                break
            hid[r] = rng.standard_normal(hid.shape[1]).astype(hid.dtype)
        else:
            raise SystemExit("no hidden row with greedy gaps found")
        gaps.append(gap)
    return gaps
