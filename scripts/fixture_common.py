"""fixture_common.py -- what the fixture scripts share (make_fixtures.py, make_fixtures_families.py,
make_fixtures_qwen3tts.py): their command line and determinism settings, the versions line and the rows of
tests/fixtures/MANIFEST.txt. Imports torch/transformers/safetensors only inside the functions, so it works in each
script's own venv (qwen-tts pins an older transformers)."""
import argparse
import os
import sys

import numpy as np


def start(doc):
    """Parse --out, create it, and make torch deterministic and transformers quiet; returns the parsed args."""
    import torch
    import transformers

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures", help="output directory (default tests/fixtures)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
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
    from safetensors import safe_open

    rows = []
    for fn, desc in log:
        path = os.path.join(outdir, fn)
        if fn.endswith(".npy"):
            a = np.load(path)
            sd = f"{list(a.shape)} {a.dtype}"
        elif fn.endswith(".safetensors"):
            with safe_open(path, framework="pt") as f:
                sd = f"safetensors, {len(list(f.keys()))} tensors"
        else:
            sd = "json"
        rows.append(f"{fn} | {os.path.getsize(path)} | {sd} | {desc}")
    return rows


def report(outdir, log, vers):
    total = sum(os.path.getsize(os.path.join(outdir, fn)) for fn, _ in log)
    print(f"total {total} bytes in {len(log)} files; {vers}")
