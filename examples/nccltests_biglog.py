"""Write a large, self-consistent all_reduce_perf text log, and time its import.

The importer's limits (harness/nccltests/limits.py) are measured with it: how long an import of
N rows takes and how much memory it holds, before and after a change. Each row is a valid row
of an 8-rank all_reduce_perf run (busbw = 2(n-1)/n x algbw, algbw = size / time), and the
trailer's ``Avg bus bandwidth`` is the mean of the rows' busbw, so the file imports cleanly up
to the row limit.

    python examples/nccltests_biglog.py --rows 10000 --out /tmp/ar.txt
    python examples/nccltests_biglog.py --mb 20 --out /tmp/ar20.txt --time

``--time`` runs ``critpath import-nccl-tests`` on it under ``/usr/bin/time -v`` (when present) and
prints the wall time, the peak RSS and the exit code.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 8
HEADER = """# nccl-tests version 2.13.11 nccl-headers=22105 nccl-library=22105
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {step_bytes}(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
""" + "".join(f"#  Rank  {r} Group  0 Pid   {4100 + r} on     node0{r // 4 + 1} device  {r % 4} [0000:{r + 1}8:00] "
              "NVIDIA H100 80GB HBM3\n" for r in range(RANKS)) + """#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
"""
# One row is about 125 bytes.
ROW_BYTES = 125
# The rows' sweep, as the header declares it: 1,024 more float elements a row, from 4 KiB.
STEP_BYTES = 4 * 1024


def rows(n: int):
    """``n`` rows of growing size, each (text, out-of-place busbw, in-place busbw)."""
    factor = 2 * (RANKS - 1) / RANKS
    for i in range(n):
        size = STEP_BYTES * (i + 1)
        count = size // 4
        sides = []
        for time_us in (20.0 + i * 0.01, 20.5 + i * 0.01):
            algbw = round(size / time_us / 1e3, 2)
            busbw = round(algbw * factor, 2)
            sides.append((f"{time_us:8.2f} {algbw:7.2f} {busbw:7.2f}       0", busbw))
        text = f"{size:12d} {count:13d}     float     sum      -1 {sides[0][0]} {sides[1][0]}\n"
        yield text, sides[0][1], sides[1][1]


def write_log(path: Path, n: int) -> None:
    total = 0.0
    with open(path, "w") as f:
        # The header's sweep is the rows': nccl-tests prints minBytes, +step, ... up to maxBytes.
        f.write(HEADER.replace("{min_bytes}", str(STEP_BYTES)).replace("{max_bytes}", str(STEP_BYTES * n))
                .replace("{step_bytes}", str(STEP_BYTES)))
        for text, a, b in rows(n):
            f.write(text)
            total += a + b
        f.write(f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {total / (2 * n):.6g} \n#\n")


def time_import(path: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="critpath-import-bench-")) / "run"
    command = [sys.executable, "-m", "harness", "import-nccl-tests", str(path), "--out", str(out)]
    timed = ["/usr/bin/time", "-v", *command] if os.path.exists("/usr/bin/time") else command
    start = time.perf_counter()
    done = subprocess.run(timed, capture_output=True, text=True, check=False)  # its exit code is measured
    wall_s = time.perf_counter() - start
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    results = out / "results.jsonl"
    return {"exit": done.returncode, "wall_s": round(wall_s, 2), "peak_rss_mb": round(int(rss.group(1)) / 1024, 1)
            if rss else None, "results_bytes": results.stat().st_size if results.exists() else 0,
            "last_line": (done.stderr.strip().splitlines() or [""])[0][:300]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--rows", type=int)
    size.add_argument("--mb", type=float, help="about this many megabytes of rows")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time", action="store_true", help="then import it under /usr/bin/time -v")
    args = parser.parse_args()
    n = args.rows if args.rows is not None else int(args.mb * 1e6 / ROW_BYTES)
    write_log(args.out, n)
    print(f"{args.out}: {n} rows, {args.out.stat().st_size} bytes")
    if args.time:
        print(time_import(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
