"""Staging throughput: `hpcshuffle stage` (4 ranks, checksums on) against `cp -r` of the same files.

Both copy the same synthetic ImageFolder (JPEGs of ImageNet-like size by default) from one
directory to another on this machine's disk and end with the data durable (`cp` is followed by
`sync`; staging flushes with syncfs before it reports). Sources are warm in the page cache for
both. Prints a table and, last, `staging/cp ratio: X` (throughput of staging over cp; > 1 is
faster), measured on the copy itself: the ~1-3 s that 4 Python interpreters need to start are
shown separately, since they do not grow with the dataset.

    python benchmarks/stage.py [--samples 3000] [--size 384] [--ranks 4]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpcshuffle.formats.synthetic import synth_imagefolder


def timed(command: list[str], **kwargs) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - start, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--size", type=int, default=384, help="image side; 384 gives ~100 KB JPEGs")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--workdir", default=None, help="default: a temporary directory under $TMPDIR")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hpcshuffle-bench-stage-", dir=args.workdir))
    try:
        source = synth_imagefolder(work / "src", args.samples, 10, num_val_samples=10, image_size=args.size)
        files = list((source / "train").rglob("*.jpg"))
        total_bytes = sum(f.stat().st_size for f in files)
        subprocess.run(["cat", *map(str, files)], check=True, stdout=subprocess.DEVNULL)  # warm both alike

        cp_seconds, _ = timed(["bash", "-c", f"cp -r {source / 'train'} {work / 'cp'} && sync"])
        bin_dir = Path(sys.executable).parent
        stage_wall, out = timed(
            [str(bin_dir / "mpiexec"), "-n", str(args.ranks), str(bin_dir / "hpcshuffle"), "stage",
             "--src", str(source), "--dst", str(work / "stage"), "--shuffle", "local",
             "--workers", str(args.ranks), "--threads", str(args.threads)],
        )
        stage_seconds = float(re.search(r" in ([0-9.]+) s ", out).group(1))
        again_wall, again_out = timed(
            [str(bin_dir / "mpiexec"), "-n", str(args.ranks), str(bin_dir / "hpcshuffle"), "stage",
             "--src", str(source), "--dst", str(work / "stage"), "--shuffle", "local",
             "--workers", str(args.ranks), "--threads", str(args.threads)],
        )
        assert "copied 0 samples" in again_out, again_out
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mib = total_bytes / 2**20
    print(f"{len(files)} files, {mib:.1f} MiB (mean {total_bytes / len(files) / 1024:.0f} KiB), "
          f"{args.ranks} ranks x {args.threads} threads; page cache warm; durable at the end")
    print(f"{'method':<34} {'seconds':>8} {'MiB/s':>8}")
    print(f"{'cp -r && sync':<34} {cp_seconds:>8.2f} {mib / cp_seconds:>8.1f}")
    print(f"{'hpcshuffle stage, copy phase':<34} {stage_seconds:>8.2f} {mib / stage_seconds:>8.1f}")
    print(f"{'hpcshuffle stage, with start-up':<34} {stage_wall:>8.2f} {mib / stage_wall:>8.1f}")
    print(f"{'re-run on the staged store':<34} {again_wall:>8.2f} {'(verify)':>8}")
    print(f"staging/cp ratio with start-up: {cp_seconds / stage_wall:.2f}")
    print(f"staging/cp ratio: {cp_seconds / stage_seconds:.2f}")


if __name__ == "__main__":
    main()
