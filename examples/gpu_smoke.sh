#!/usr/bin/env bash
# One-GPU smoke test of the CUDA/NCCL paths: NCCL backend at world 1 with NCCL_ALGO=Ring/Tree and
# NCCL's default on their own communicators, CUDA-event timing, the nvidia-ml-py fingerprint.
# A single GPU cannot show multi-rank NCCL behaviour (no ring or tree traffic crosses a link at
# world 1): this proves the code paths run and the records are valid, nothing about bandwidth.
set -euo pipefail
out=${1:-reports/gpu-smoke}
python -m harness run --backend nccl --world 1 --families allreduce --sizes 8:64M:x8 --out "$out"
python - "$out" <<'PY'
import json, sys
from harness import load_records
out = sys.argv[1]
fp = json.load(open(f"{out}/fingerprint.json"))
print("nccl_version:", fp["nccl_version"], "driver:", fp["gpus"].get("driver_version"))
for d in fp["gpus"].get("devices", []):
    print("gpu:", d["name"], "pcie", d.get("pcie_gen"), "x", d.get("pcie_width"), "nvlink active", d.get("nvlink_active"))
for r in load_records(out):
    print(r.case_id, r.status, r.timer, "p50_us=%.1f" % (r.summary.p50_ns / 1e3) if r.summary else "",
          r.extra.get("rank_reports", [{}])[0].get("nccl_algo_env"))
PY
