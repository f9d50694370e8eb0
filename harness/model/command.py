"""``critpath model``: modelled allreduce time per scale, size and algorithm; the ring/tree
crossover per scale; NCCL's own model beside it; optional calibration from a measured run; plots.

Every figure it prints or writes is a model output and says so ("modelled", "source": "model").
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import io
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np
from rich.table import Table

from harness.core import atomic
from harness.core.claim import claim_dir
from harness.core.console import Console
from harness.core.echo import shown
from harness.core.options import (comma_separated, given_flags, model_size_sweep, name_option, path_option, print_error,
                                  refuse_given)
from harness.core.progression import parse_progression
from harness.core.scale import MAX_WORLD
from harness.core.sizes import MAX_SIZES, format_size, parse_sizes
from harness.model import alphabeta as ab
from harness.model import nccl_tuning, plots
from harness.model import scale_claims as claims
from harness.model.profile import HardwareProfile, LinkTier, ProfileError, load_profile

if TYPE_CHECKING:  # scipy loads only when a fit is asked for, not on every critpath command
    from harness.model.calibrate import Fit

DEFAULT_RANKS = "8,16,32,...,16384"
DEFAULT_SIZES = "8:1G:x2"
DEFAULT_PROFILE = "dgx-a100-roce"
MAX_NAMED_FIELDS = 20  # non-finite fields of model.json named one by one; the count says the rest


# Scales one model run tabulates: as many as a size sweep has sizes.
MAX_SCALES = MAX_SIZES
# Modelled times one run computes and writes (algorithms x scales x sizes): the default scales with
# every algorithm and MAX_SIZES sizes (12 x 5 x 4,096) fit; 4,096 scales x 4,096 sizes took 3.8 GB
# and ended in a MemoryError, and 1.3 million cells took 14 s and wrote 84 MB.
MAX_MODEL_CELLS = 1 << 18


def parse_ranks(text: str) -> tuple[int, ...]:
    """``8,16,32,...,16384``: scales in any order, or a progression by the one rule every ``...``
    option reads (harness.core.progression). Each scale is a job's ranks, 1 to MAX_WORLD: the
    model's arithmetic (an int64 of ranks, a float of time) overflowed past it, and no machine it
    describes is larger."""
    return parse_progression(text, "ranks", 1, MAX_WORLD, MAX_SCALES)


def _ranks_arg(text: str) -> tuple[int, ...]:
    try:
        return parse_ranks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _algos_arg(text: str) -> tuple[str, ...]:
    """``--algos ring,tree``: the list option's rules (none empty, none twice), each a modelled algorithm."""
    algos = comma_separated(text)
    unknown = [a for a in algos if a not in ab.ALLREDUCE_MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(map(shown, unknown))}; known: {', '.join(ab.ALLREDUCE_MODELS)}")
    return algos


DEFAULT_STATISTIC = "p50"
DEFAULT_LOSS = "soft_l1"
# The options that shape the fit of --calibrate (argparse dest -> flag).
CALIBRATE_ONLY = {"calibrate_tier": "--calibrate-tier", "statistic": "--statistic", "loss": "--loss"}


def register(sub) -> None:
    p = sub.add_parser("model", help="modelled allreduce time at scale (alpha-beta and NCCL's tuning model)")
    p.add_argument("--ranks", type=_ranks_arg, default=parse_ranks(DEFAULT_RANKS), metavar="LIST",
                   help=f"scales, e.g. {DEFAULT_RANKS} ('...' continues the progression)")
    p.add_argument("--sizes", type=model_size_sweep, default=parse_sizes(DEFAULT_SIZES), metavar="SPEC",
                   help=f"allreduce sizes in bytes (default {DEFAULT_SIZES})")
    p.add_argument("--profile", default=None, type=name_option,
                   help=f"hardware profile YAML or shipped name (default {DEFAULT_PROFILE}; with --calibrate alone: "
                        "a one-tier loopback profile from the fit)")
    p.add_argument("--algos", type=_algos_arg, default=tuple(ab.ALLREDUCE_MODELS), metavar="LIST",
                   help=f"comma list of {', '.join(ab.ALLREDUCE_MODELS)}")
    p.add_argument("--calibrate", type=path_option, metavar="RUN_DIR", action="append",
                   help="fit alpha/beta from the allreduce records of a run directory and use them "
                        "(repeat for several runs, e.g. one per world)")
    p.add_argument("--calibrate-tier", metavar="TIER", type=name_option,
                   help="profile tier the fit replaces (default: the profile's intra-node tier; with --calibrate only)")
    # Defaults None, so that one given without --calibrate (a fit that never runs) is told apart.
    p.add_argument("--statistic", choices=("p50", "mean"), default=None,
                   help=f"measured statistic to fit (default {DEFAULT_STATISTIC}; with --calibrate only)")
    p.add_argument("--loss", choices=("soft_l1", "linear", "huber", "cauchy"), default=None,
                   help=f"least-squares loss of the fit (default {DEFAULT_LOSS}, robust to time-slice outliers; "
                        "with --calibrate only)")
    p.add_argument("--claims", action="store_true", help="also print the A1.tree and A2.allreduce reproductions")
    p.add_argument("--out", type=path_option, help="directory for model.json, modelled_times.csv and plots "
                                             "(default reports/model-<time>)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.set_defaults(func=cmd_model)


def _calibrated_profile(fits: "list[Fit]", profile: Optional[HardwareProfile], tier_name: Optional[str],
                        run_dir) -> tuple[HardwareProfile, dict[str, ab.Links]]:
    """The profile with the fitted tier(s) in place, and per-algorithm links.

    With p2p_tiers records (a run across nodes) the per-tier fits replace the profile's intra and
    inter tiers for every algorithm. Otherwise the allreduce fits replace one tier: each measured
    algorithm gets its own fit; the rest use the ring fit, the plainest point-to-point pattern."""
    from harness.model.calibrate import TIER_ALGOS  # calibrate imports scipy (1 s): only --calibrate pays it

    joint = {f.algo: f for f in fits if len(f.worlds) == max(len(g.worlds) for g in fits if g.algo == f.algo)}
    tier_fits = {TIER_ALGOS[a]: f for a, f in joint.items() if a in TIER_ALGOS}
    if tier_fits and profile is not None:
        tiers = dict(profile.tiers)
        for which, f in sorted(tier_fits.items()):
            name = profile.intra if which == "intra" else profile.inter
            tiers[name] = replace(tiers[name], alpha_us=f.alpha_us, bandwidth_gbytes_s=f.bandwidth_gbytes_s,
                                  source=f"p2p_tiers {which} fitted from {', '.join(map(str, run_dir))}")
        profile = replace(profile, tiers=tiers)
        return profile, {algo: ab.Links.from_profile(profile) for algo in ab.ALLREDUCE_MODELS}
    base_fit = joint.get("ring") or joint.get("tree") or joint.get("p2p_intra") or next(iter(joint.values()))
    source = f"fitted from {', '.join(map(str, run_dir))} ({base_fit.statistic}, worlds {','.join(map(str, base_fit.worlds))})"
    if profile is None:
        tier = LinkTier("loopback", "loopback", base_fit.alpha_us, base_fit.bandwidth_gbytes_s, source)
        profile = HardwareProfile("calibrated-loopback", f"one tier {source}", 1 << 30, {"loopback": tier},
                                  "loopback", "loopback", path=", ".join(map(str, run_dir)))
        tier_name = "loopback"
    tier_name = tier_name or profile.intra
    if tier_name not in profile.tiers:
        raise ProfileError(f"--calibrate-tier {tier_name!r} is not a tier of {profile.path or profile.name}")
    links = {}
    for algo in ab.ALLREDUCE_MODELS:
        f = joint.get(ab.MEASURED_ALGO.get(algo, ""), base_fit)
        tiers = dict(profile.tiers)
        tiers[tier_name] = replace(tiers[tier_name], alpha_us=f.alpha_us, bandwidth_gbytes_s=f.bandwidth_gbytes_s,
                                   source=source)
        links[algo] = ab.Links.from_profile(replace(profile, tiers=tiers))
    tiers = dict(profile.tiers)
    tiers[tier_name] = replace(tiers[tier_name], alpha_us=base_fit.alpha_us,
                               bandwidth_gbytes_s=base_fit.bandwidth_gbytes_s, source=source)
    return replace(profile, tiers=tiers), links


def cmd_model(args) -> int:
    from harness.model.calibrate import CalibrationError, calibrate  # scipy: as above

    console = Console(soft_wrap=True)
    algos = args.algos
    cells = len(algos) * len(args.ranks) * len(args.sizes)
    if cells > MAX_MODEL_CELLS:  # refused before a profile is read or an array is built
        print_error("model", f"--sizes x --ranks x --algos: {len(args.sizes)} sizes x {len(args.ranks)} scales x "
                             f"{len(algos)} algorithms is {cells} modelled times; at most MAX_MODEL_CELLS = "
                             f"{MAX_MODEL_CELLS} (fewer sizes, scales or algorithms)")
        return 2
    if not args.calibrate:  # each shapes a fit: without one it would do nothing
        given = given_flags(args, CALIBRATE_ONLY)
        refuse_given(given, f"{'shapes' if len(given) == 1 else 'shape'} the fit of --calibrate; give --calibrate "
                            "RUN_DIR too")
    statistic = args.statistic or DEFAULT_STATISTIC
    loss = args.loss or DEFAULT_LOSS
    try:
        profile = load_profile(args.profile or DEFAULT_PROFILE) if (args.profile or not args.calibrate) else None
        fits: list = []
        extrapolated: list = []
        withheld = ""
        if args.calibrate:
            calibration = calibrate(args.calibrate, statistic, loss=loss)
            fits, extrapolated, withheld = calibration.fits, calibration.extrapolated, calibration.withheld_text
            profile, links_by_algo = _calibrated_profile(fits, profile, args.calibrate_tier, args.calibrate)
        else:
            links_by_algo = {a: ab.Links.from_profile(profile) for a in algos}
    except (ProfileError, CalibrationError) as exc:
        print_error("model", exc)
        return 2

    scales = np.array(args.ranks, dtype=np.float64)
    sizes = np.array(args.sizes, dtype=np.float64)
    times_s, crossover, nccl = model_grid(profile, links_by_algo, scales, sizes, algos)

    out = args.out or Path("reports") / f"model-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M%S}"
    claim_dir(out, "model")
    files = _outputs(out, profile, scales, sizes, algos, times_s, crossover, nccl, fits, extrapolated)
    plotted = {} if args.no_plots else plots.render_all(out, profile, scales, sizes, algos, times_s, crossover, nccl, fits)
    # One set: a full disk leaves the previous model whole, never its model.json new beside its
    # plots old; plots an earlier model left that this one did not draw are removed after.
    atomic.write_set({**files, **plotted})
    for name in plots.PLOT_NAMES:
        if out / name not in plotted:
            _remove_plot(out / name)
    if withheld:
        print(f"critpath model: {withheld}", file=sys.stderr)
    _print_summary(console, profile, scales, sizes, algos, times_s, crossover, nccl, fits)
    for e in extrapolated:
        console.print(f"extrapolation in p: {e.algo} fitted on worlds {','.join(map(str, e.train_worlds))} predicts "
                      f"world {e.test_world} with median |error| {e.median_abs_rel_error:.0%}, rms {e.rms_rel_error:.0%} "
                      f"(n={e.n})", markup=False, highlight=False)
    if args.claims:
        _print_claims(console, profile)
    if not args.no_plots:
        console.print("modelled figures: " + ", ".join(str(p) for p in plotted))
    console.print(f"modelled results in {out} (source: model; profile {profile.path or profile.name})", markup=False,
                  highlight=False)
    return 0


def model_grid(profile: HardwareProfile, links_by_algo: dict[str, ab.Links], scales, sizes, algos):
    """What ``critpath model`` computes before it writes anything: modelled seconds per algorithm,
    scale and size; the ring/tree crossovers per scale; NCCL's own model (None without one).
    ``harness/microbench.py`` times this."""
    times_s = np.stack([ab.sweep(scales, sizes, links_by_algo[a], (a,))[0] for a in algos])
    return times_s, _crossovers(scales, sizes, times_s, algos), _nccl_grid(profile, scales, sizes)


def _crossovers(scales, sizes, times_s, algos) -> dict[str, list[float]]:
    """Per scale, the size from which ring is no slower than each tree-like algorithm."""
    out = {}
    if "ring" not in algos:
        return out
    ring = times_s[algos.index("ring")]
    for other in ("tree", "dbtree"):
        if other in algos:
            t = times_s[algos.index(other)]
            out[f"ring_vs_{other}_bytes"] = [ab.crossover_bytes(sizes, t[i], ring[i]) for i in range(len(scales))]
    return out


def _nccl_grid(profile: HardwareProfile, scales, sizes) -> Optional[dict]:
    if profile.nccl is None:
        return None
    g = profile.gpus_per_node
    nodes = np.ceil(scales / np.minimum(scales, g))[:, None]
    p = scales[:, None]
    n = sizes[None, :]
    best_us, labels = nccl_tuning.choose(p, nodes, n, profile.nccl)
    ring_us, _ = nccl_tuning.choose(p, nodes, n, profile.nccl, algos=("ring",))
    tree_us, _ = nccl_tuning.choose(p, nodes, n, profile.nccl, algos=("tree",))
    cross = [ab.crossover_bytes(sizes, tree_us[i], ring_us[i]) for i in range(len(scales))]
    return {"best_us": best_us, "labels": labels, "ring_us": ring_us, "tree_us": tree_us, "ring_vs_tree_bytes": cross,
            "source": nccl_tuning.NCCL_SOURCE, "protocols": nccl_tuning.enabled_protocols(profile.nccl)}


def _fmt_size(value: float) -> str:
    if not math.isfinite(value):
        return "beyond sweep"
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


def _print_summary(console, profile, scales, sizes, algos, times_s, crossover, nccl, fits) -> None:
    for f in fits:
        held = (f"held-out rms {f.rms_rel_error_heldout:.0%} median {f.median_abs_rel_error_heldout:.0%} "
                f"max {f.max_abs_rel_error_heldout:.0%} (n={f.n_heldout})" if f.n_heldout else
                "nothing held out (too few sizes)")
        console.print(
            f"fit {f.algo} worlds {','.join(map(str, f.worlds))} ({f.statistic}): alpha {f.alpha_us:.1f} us, "
            f"beta {f.beta_ns_per_byte:.3f} ns/B ({f.bandwidth_gbytes_s:.3g} GB/s); rel. error rms fit "
            f"{f.rms_rel_error_fit:.0%}, {held}", markup=False, highlight=False)
    table = Table(title=f"modelled ring/tree crossover per scale (profile {profile.name})")
    table.add_column("ranks", justify="right")
    table.add_column("nodes", justify="right")
    for key in crossover:
        table.add_column(f"modelled {key.replace('_bytes', '')}", justify="right")
    if nccl:
        table.add_column("modelled NCCL 2.7.5 ring_vs_tree", justify="right")
    g = profile.gpus_per_node
    for i, p in enumerate(scales):
        row = [str(int(p)), str(int(math.ceil(p / min(p, g))))]
        row += [_fmt_size(crossover[k][i]) for k in crossover]
        if nccl:
            row.append(_fmt_size(nccl["ring_vs_tree_bytes"][i]))
        table.add_row(*row)
    console.print(table)
    picks = [s for s in (8, 1 << 16, 1 << 20, 1 << 26) if s in set(sizes.astype(int))]
    if picks:
        t2 = Table(title="modelled allreduce time (us)")
        t2.add_column("ranks", justify="right")
        t2.add_column("size", justify="right")
        for a in algos:
            t2.add_column(f"modelled {a}", justify="right")
        if nccl:
            t2.add_column("modelled NCCL pick", justify="right")
        index = {int(s): j for j, s in enumerate(sizes)}
        for i, p in enumerate(scales):
            for s in picks:
                j = index[s]
                row = [str(int(p)), format_size(s)] + [f"{times_s[k, i, j] * 1e6:.1f}" for k in range(len(algos))]
                if nccl:
                    row.append(f"{nccl['best_us'][i, j]:.1f} {nccl['labels'][i, j]}")
                t2.add_row(*row)
        console.print(t2)


def _print_claims(console, profile: HardwareProfile) -> None:
    console.print("A1.tree (tree vs ring, 4 x DGX A100 over RoCE; claim: -38 % at 24+ GPUs), modelled:")
    for size in (8 << 10, 64 << 10, 1 << 20, 16 << 20):
        if profile.nccl:
            rows = claims.a1_nccl_pick(profile, size)
            console.print(f"  NCCL 2.7.5 model, NCCL_ALGO=Tree vs Ring (protocol picked), {format_size(size)}: "
                          + ", ".join(f"{r.gpus} GPUs {r.change:+.0%}" for r in rows), markup=False, highlight=False)
    for size in (8 << 10, 1 << 20):
        rows = claims.a1_alphabeta(profile, size)
        console.print(f"  alpha-beta dbtree vs ring, {format_size(size)}: "
                      + ", ".join(f"{r.gpus} GPUs {r.change:+.0%}" for r in rows), markup=False, highlight=False)
        if profile.nccl:
            for proto in nccl_tuning.enabled_protocols(profile.nccl):
                rows = claims.a1_nccl(profile, size, proto)
                console.print(f"  NCCL 2.7.5 model Tree vs Ring /{proto}, {format_size(size)}: "
                              + ", ".join(f"{r.gpus} GPUs {r.change:+.0%}" for r in rows), markup=False, highlight=False)
    console.print("A2.allreduce (680 ms -> 195 ms; 'after' algorithm unknown), modelled: parameters it would take")
    for gpus in (1024, 10240):
        for algo in ("dbtree", "hierarchical"):
            s = claims.a2_solve(profile, gpus, algo)
            console.print(
                f"  {gpus} GPUs, ring -> {algo}, beta {s.beta_ns_per_byte:.3f} ns/B: "
                + (f"alpha {s.alpha_us:.1f} us, n {s.size_bytes / 1e9:.2f} GB; ring latency share "
                   f"{s.ring_latency_share:.0%}; alpha {'plausible' if s.plausible_alpha else 'implausible'} "
                   "for one network hop" if s.alpha_us > 0 and s.size_bytes > 0 else
                   "no solution with alpha > 0 and n > 0 (these two figures cannot both hold in this model)"),
                markup=False, highlight=False)


def _outputs(out: Path, profile, scales, sizes, algos, times_s, crossover, nccl, fits,
             extrapolated=()) -> dict[Path, bytes]:
    """model.json and modelled_times.csv, path -> bytes, written with the plots as one set."""
    doc = {
        "schema": "critpath.model/1",
        "source": "model",
        "note": "modelled figures, not measurements",
        "argv": sys.argv,
        "profile": {"name": profile.name, "path": profile.path,
                    "tiers": {k: vars(v) for k, v in profile.tiers.items()},
                    "gpus_per_node": profile.gpus_per_node, "intra": profile.intra, "inter": profile.inter},
        "scales": [int(s) for s in scales],
        "sizes_bytes": [int(s) for s in sizes],
        "modelled_time_us": {a: (times_s[k] * 1e6).tolist() for k, a in enumerate(algos)},
        "modelled_crossover_bytes": {k: [None if not math.isfinite(v) else v for v in vals] for k, vals in crossover.items()},
        "calibration": [f.to_dict() for f in fits],
        "calibration_extrapolation": [asdict(e) for e in extrapolated],
    }
    if nccl:
        doc["nccl_model"] = {
            "source": nccl["source"], "protocols": list(nccl["protocols"]),
            "modelled_best_us": nccl["best_us"].tolist(), "pick": nccl["labels"].tolist(),
            "modelled_ring_vs_tree_bytes": [None if not math.isfinite(v) else v for v in nccl["ring_vs_tree_bytes"]],
        }

    # A profile's figures can overflow a float64 (a bandwidth of 1e-320 GB/s): such a figure is
    # null, named with the reason, so model.json stays strict JSON.
    doc, nulled = atomic.finite_or_null(doc)
    if nulled:
        doc["non_finite"] = {"reason": "not a finite float64 in this model (the profile's figures overflow it); "
                                       "written as null", "count": len(nulled), "fields": nulled[:MAX_NAMED_FIELDS]}
    table = io.StringIO()
    w = csv.writer(table)
    w.writerow(["ranks", "size_bytes", "algo", "modelled_time_us", "source"])
    for k, a in enumerate(algos):
        for i, p in enumerate(scales):
            for j, s in enumerate(sizes):
                w.writerow([int(p), int(s), a, f"{times_s[k, i, j] * 1e6:.6g}", "model"])
    return {out / "model.json": atomic.json_bytes(out / "model.json", doc),
            out / "modelled_times.csv": table.getvalue().encode("utf-8")}


def _remove_plot(path: Path) -> None:
    """A plot an earlier model wrote here and this one did not draw."""
    try:
        if not path.is_dir():
            path.unlink()
    except FileNotFoundError:
        pass
