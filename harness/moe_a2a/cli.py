"""``critpath moe-sim`` (MODELLED scale-out of the MoE step) and ``critpath moe-report`` (measured
effective throughput of a run's moe_a2a cases relative to their uniform twin)."""
from __future__ import annotations

import argparse
from dataclasses import asdict, fields, replace
from math import nan
from pathlib import Path
from typing import Optional

from rich.table import Table

from harness.core import atomic
from harness.core.inputfile import declare_inputs
from harness.core.options import (at_least, comma_separated, given_flags, integer, number_in, path_option, positive,
                                  print_error, refuse_given)
from harness.core.store import load_whole, run_inputs
from harness.moe_a2a import sim
from harness.moe_a2a.config import mitigation_label, workload_label
from harness.tables.terminal import wide_console

# The articles' figures these commands put beside their own (claims.md, article 001).
CLAIM_SKEW_REL = 0.47  # A1.moe_skew: 17x hot expert -> effective throughput 47 %
CLAIM_ADAPTIVE_REL = 0.89  # A1.moe_adaptive: adaptive routing, 100 ms window -> 89 %


# What the event-level model is meant for (8..256 ranks, DeepSeek-V3's shapes); beyond these a
# value is a typo that would run for hours or fill memory. Its cost grows with the square of two
# things, so each is bounded alone and together:
# - rank pairs: every step is world^2 messages, each an event in Python (256 ranks: about 7 s; 1,024:
#   over a minute; 65,536 tried a 32 GiB array). MAX_RANK_PAIRS bounds world^2 summed over
#   --worlds, so the default 8..256 (87,360 pairs) fits and a list of 64 large worlds does not.
# - expert slots: the placement scans every slot for each slot it places, (experts + world x
#   spare slots)^2 (16,384 spare slots at 8 ranks took 16 s; 4,096 slots take about a second).
MAX_MODELLED_WORLD = 256
MAX_RANK_PAIRS = 2 * MAX_MODELLED_WORLD ** 2
MAX_SLOTS = 4096  # experts + world x --spare-slots, per modelled world
MAX_TOKENS = 1 << 20  # per rank
MAX_HIDDEN = 1 << 20
MAX_EXPERTS = MAX_SLOTS
MAX_FACTOR = 1e6  # --hot-factor, --capacity-factor
MAX_MS = 1e9  # about 11 days: --drift-ms, --window-ms
MAX_US = 1e9
MAX_LIST = 64  # values of --worlds or --window-ms
FROM_RUN_SPARE_SLOTS = 1  # --from-run models the run's replicate cases with one spare slot a rank


def _list_of(parse, what: str):
    def parse_list(text: str) -> tuple:
        values = tuple(parse(x) for x in comma_separated(text))
        if len(values) > MAX_LIST:
            raise argparse.ArgumentTypeError(f"{len(values)} values; at most {MAX_LIST}")
        if len(set(values)) < len(values):  # 8,08 name one world twice
            raise argparse.ArgumentTypeError(f"{text!r}: a value is given twice")
        return values
    return parse_list


_ints = _list_of(at_least(1, MAX_MODELLED_WORLD), "integers")
_floats = _list_of(positive(float, MAX_MS), "numbers")


DEFAULT_WORLDS = (8, 16, 32, 64, 128, 256)
# The options that shape the modelled step (dest -> flag): --from-run takes each from the run's
# uniform case instead (its world, tokens, hidden, experts, top-k, the hot case's skew, one spare
# slot a rank), and the fit measures the expert time. Their defaults are None, so that a value
# given with --from-run is told from one not given; SimConfig holds the defaults.
SHAPE_FLAGS = {"worlds": "--worlds", "tokens": "--tokens", "hidden": "--hidden", "bytes_per_elem": "--bytes-per-elem",
               "experts": "--experts", "top_k": "--top-k", "hot_factor": "--hot-factor",
               "spare_slots": "--spare-slots", "capacity_factor": "--capacity-factor",
               "expert_us_per_pair": "--expert-us-per-pair"}


def register(sub) -> None:
    d = sim.SimConfig()
    p = sub.add_parser("moe-sim", help="MODELLED MoE all-to-all step at 8..256 ranks (event-level)")
    p.add_argument("--worlds", type=_ints, help=f"ranks to model (default {','.join(map(str, DEFAULT_WORLDS))})")
    p.add_argument("--tokens", type=at_least(1, MAX_TOKENS), help=f"tokens per rank (default {d.tokens}, DeepEP)")
    p.add_argument("--hidden", type=at_least(1, MAX_HIDDEN), help=f"default {d.hidden}")
    p.add_argument("--bytes-per-elem", type=integer, choices=(1, 2, 4),
                   help=f"dispatch payload (default {d.bytes_per_elem}: FP8)")
    p.add_argument("--experts", type=at_least(1, MAX_EXPERTS), help=f"default {d.experts}")
    p.add_argument("--top-k", type=at_least(1, MAX_EXPERTS), help=f"default {d.top_k}")
    p.add_argument("--hot-factor", type=positive(float, MAX_FACTOR),
                   help=f"hot expert load / each other's (default {d.hot_factor:g})")
    p.add_argument("--spare-slots", type=at_least(0, MAX_EXPERTS), help=f"replica slots per rank (default {d.spare_slots})")
    p.add_argument("--capacity-factor", type=positive(float, MAX_FACTOR), help=f"default {d.capacity_factor:g}")
    p.add_argument("--drift-ms", type=positive(float, MAX_MS), default=d.drift_ms,
                   help="the hot expert moves once per this period")
    p.add_argument("--window-ms", type=_floats, default=d.windows_ms,
                   help=f"adaptive reuse windows (default {','.join(f'{w:g}' for w in d.windows_ms)})")
    p.add_argument("--expert-us-per-pair", type=number_in(0.0, MAX_US), help="expert time per (token, expert) pair")
    p.add_argument("--planner-us", type=number_in(-MAX_US, MAX_US), help="placement recompute time; 0 or negative: time it here")
    p.add_argument("--from-run", type=path_option, metavar="RUN_DIR",
                   help="fit a one-tier model to a measured moe_a2a run and compare at its world instead "
                        f"(the run gives the shape: {', '.join(SHAPE_FLAGS.values())} are refused with it)")
    p.add_argument("--json", type=path_option, metavar="PATH", help="also write the modelled scenarios as JSON")
    p.set_defaults(func=cmd_sim)

    r = sub.add_parser("moe-report", help="measured moe_a2a throughput relative to the uniform case of the same run")
    r.add_argument("run_dir", type=path_option)
    r.add_argument("--json", type=path_option, metavar="PATH",
                   help="also write the rows as JSON; a ratio this run cannot give is null")
    r.set_defaults(func=cmd_report)


def _fmt_pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.0f} %"


def _too_large(worlds: tuple[int, ...], experts: int, spare_slots: int) -> str:
    """Why these options together would not finish in seconds (see MAX_RANK_PAIRS, MAX_SLOTS); ''
    when they would."""
    pairs = sum(w * w for w in worlds)
    if pairs > MAX_RANK_PAIRS:
        return (f"--worlds {','.join(map(str, worlds))}: {pairs} rank pairs (world x world, summed); at most "
                f"MAX_RANK_PAIRS = {MAX_RANK_PAIRS} (fewer or smaller worlds)")
    slots = experts + max(worlds) * spare_slots
    if slots > MAX_SLOTS:
        return (f"--experts {experts} + --worlds {max(worlds)} x --spare-slots {spare_slots}: {slots} expert slots; "
                f"at most MAX_SLOTS = {MAX_SLOTS} (fewer experts or spare slots)")
    return ""


def _run_too_large(p) -> str:
    """Why the shape of a run's record is past what moe-sim models (the bounds its options are held
    to, a record's keys in place of the options); '' when it is not."""
    for key, bound, name in (("world", MAX_MODELLED_WORLD, "MAX_MODELLED_WORLD"), ("tokens", MAX_TOKENS, "MAX_TOKENS"),
                             ("hidden", MAX_HIDDEN, "MAX_HIDDEN"), ("top_k", MAX_EXPERTS, "MAX_EXPERTS")):
        if p[key] > bound:
            return f"{key}={p[key]}: at most {name} = {bound}"
    return _too_large((p["world"],), p["experts_per_rank"] * p["world"], FROM_RUN_SPARE_SLOTS)


SIM_FIELDS = frozenset(f.name for f in fields(sim.SimConfig))


def _config(args) -> sim.SimConfig:
    """The modelled shape the options give, SimConfig's defaults for those not given."""
    given = {dest: getattr(args, dest) for dest in SHAPE_FLAGS if dest in SIM_FIELDS and getattr(args, dest) is not None}
    return sim.SimConfig(**given, drift_ms=args.drift_ms, windows_ms=args.window_ms)


def cmd_sim(args) -> int:
    console = wide_console()
    model = sim.CostModel()
    if args.expert_us_per_pair is not None:
        model = replace(model, expert_us_per_pair=args.expert_us_per_pair)
    if args.planner_us is not None:
        model = replace(model, planner_us=args.planner_us if args.planner_us > 0 else None)
    if args.from_run is not None:
        refuse_given(given_flags(args, SHAPE_FLAGS), "set what --from-run takes from the run (the shape of its "
                                                     "uniform case, and the expert time its fit measures)")
        return _sim_from_run(args.from_run, args.drift_ms, args.window_ms, model, console, args.json)
    cfg = _config(args)
    worlds = args.worlds or DEFAULT_WORLDS
    too_large = _too_large(worlds, cfg.experts, cfg.spare_slots)
    if too_large:
        print_error("moe-sim", too_large)
        return 2
    results = {}
    for world in worlds:
        try:
            results[world] = sim.simulate(world, cfg, model)
        except ValueError as exc:
            print_error("moe-sim", f"world {world}: {exc}")
            return 2
    names = [s.name for s in next(iter(results.values()))]
    table = Table(title=f"MODELLED (source: {sim.SOURCE}, cost model {model.fitted_from}) — throughput relative "
                        f"to the uniform step; {cfg.tokens} tokens x top-{cfg.top_k} of {cfg.experts} experts, "
                        f"hot x{cfg.hot_factor:g}", title_justify="left")
    table.add_column("ranks", justify="right")
    table.add_column("uniform step (ms)", justify="right")
    for name in names[1:]:
        table.add_column(name, justify="right")
    table.add_column("hot rank max/mean", justify="right")
    for world, scenarios in results.items():
        by = {s.name: s for s in scenarios}
        table.add_row(str(world), f"{by['uniform'].step_us / 1e3:.2f}",
                      *[_fmt_pct(by[n].rel_throughput) for n in names[1:]], f"{by['hot'].rank_max_over_mean:.2f}")
    console.print(table)
    _print_claims(console, results)
    console.print(f"cost model ({model.fitted_from}): intra {model.intra}, inter {model.inter}, "
                  f"{model.ranks_per_node} ranks/node, {model.msg_overhead_us} us/message, "
                  f"{model.expert_us_per_pair} us/pair, planner {model.planner_us} us, expert {model.expert_bytes} B",
                  markup=False, highlight=False)
    if args.json:
        _write_json(args.json, cfg, model, results)
    return 0


def _write_json(path: Path, cfg: sim.SimConfig, model: sim.CostModel, results: dict, **more) -> None:
    """The modelled scenarios of each world as JSON, with the shape and cost model they came from;
    ``more``: what a model fitted to a run adds (its basis, the measured rows), a ratio the run
    cannot give null, as JSON cannot hold NaN."""
    payload = {"source": sim.SOURCE, "config": asdict(cfg), "cost_model": asdict(model),
               "results": {str(w): [asdict(s) for s in sc] for w, sc in results.items()}, **more}
    atomic.write_json(path, atomic.finite_or_null(payload)[0], sort_keys=False)


def _print_claims(console, results) -> None:
    """Where the modelled curve crosses the articles' figures (shape, not a match of hardware)."""
    lines = []
    for world, scenarios in results.items():
        by = {s.name: s for s in scenarios}
        adaptive = [s for s in scenarios if s.name.startswith("adaptive-") and s.name != "adaptive-step"]
        lines.append(
            f"  {world:>4} ranks: A1.moe_skew hot {_fmt_pct(by['hot'].rel_throughput)} (article 47 %); "
            f"A1.moe_replica naive {_fmt_pct(by['replicate-naive'].rel_throughput)} vs unmitigated "
            f"{_fmt_pct(by['hot'].rel_throughput)} and aware {_fmt_pct(by['replicate-aware'].rel_throughput)}; "
            f"A1.moe_adaptive " + ", ".join(f"{s.name} {_fmt_pct(s.rel_throughput)}" for s in adaptive)
            + f" vs per-step {_fmt_pct(by['adaptive-step'].rel_throughput)} (article 47 % -> 89 %)"
        )
    console.print("claims beside the MODELLED figures:\n" + "\n".join(lines), markup=False, highlight=False)


def _sim_from_run(run_dir: Path, drift_ms: float, windows_ms: tuple[float, ...], model, console,
                  json_path: Optional[Path]) -> int:
    """The model fitted to ``run_dir``'s uniform case, beside what that run measured."""
    declare_inputs(run_inputs([run_dir]))  # --json may not replace the run's files
    records = list(load_whole(run_dir).records)
    try:
        fit_record = sim.fit_basis(records)
        # before the fit, which models a step of the record's shape
        too_large = _run_too_large(fit_record.params)
        if too_large:
            print_error("moe-sim", f"{run_dir}: case {fit_record.case_id} is past what the model runs in seconds: "
                                   f"{too_large} (experts_per_rank x world as --experts, world as --worlds)")
            return 2
        fitted, basis = sim.fit_from_run(records, model)
    except ValueError as exc:
        print_error("moe-sim", f"{run_dir}: {exc}")
        return 2
    measured = _relative(records)
    uniform = next(r for r in records if r.family == "moe_a2a" and r.params["workload"] == "uniform"
                   and r.params["mitigation"] == "none")
    p = uniform.params
    hot = [r for r in records if r.family == "moe_a2a" and r.params["workload"] == "hot"]
    cfg = sim.SimConfig(tokens=p["tokens"], hidden=p["hidden"], bytes_per_elem=p["bytes_per_elem"],
                        experts=p["experts_per_rank"] * p["world"], top_k=p["top_k"],
                        hot_factor=hot[0].params["skew"] if hot else sim.SimConfig.hot_factor, spare_slots=FROM_RUN_SPARE_SLOTS,
                        drift_ms=drift_ms, windows_ms=windows_ms)
    modelled = sim.simulate(p["world"], cfg, fitted)
    scenarios = {s.name: s for s in modelled}
    table = Table(title=f"MODELLED vs measured at {p['world']} ranks — one-tier model fitted from "
                        f"{run_dir} ({basis['case_id'].split('/')[0]} uniform case)", title_justify="left")
    for col in ("case", "measured vs uniform case (mean, p50)", "measured vs paired twin (mean, p50)",
                "modelled rel. throughput",
                "measured rank max/mean", "modelled rank max/mean"):
        table.add_column(col, justify="right")
    pairs = {("hot", "none"): "hot", ("hot", "replicate/naive"): "replicate-naive",
             ("hot", "replicate/aware"): "replicate-aware"}
    for row in measured:
        name = pairs.get((row["workload"], row["mitigation"]))
        if name is None or row.get("drift_steps"):
            continue
        m = scenarios[name]
        table.add_row(row["label"], f"{_fmt_pct(row['rel_throughput'])}, {_fmt_pct(row['rel_throughput_p50'])}",
                      f"{_fmt_pct(row['paired_rel_throughput'])}, {_fmt_pct(row['paired_rel_throughput_p50'])}",
                      _fmt_pct(m.rel_throughput),
                      f"{row['rank_max_over_mean']:.2f}", f"{m.rank_max_over_mean:.2f}")
    console.print(table)
    console.print(f"fitted: all-to-all {basis['a2a_us']:.0f} us as bandwidth {fitted.intra.bandwidth_gbps:.3f} GB/s, "
                  f"{fitted.expert_us_per_pair:.2f} us/pair, {fitted.step_overhead_us:.0f} us/step overhead (phase p50s {basis['phase_p50_us']})",
                  markup=False, highlight=False)
    if json_path:
        _write_json(json_path, cfg, fitted, {p["world"]: modelled}, fitted_from=basis, measured=measured)
    return 0


def _relative(records) -> list[dict]:
    """Each passing moe_a2a record with its tokens/s over the uniform, unmitigated case of the same
    shape in the same run (a ratio of two measurements, both from this run)."""
    shape_keys = ("backend", "bytes_per_elem", "compute", "experts_per_rank", "hidden", "ns_per_token", "tokens",
                  "top_k", "world")
    moe = [r for r in records if r.family == "moe_a2a" and r.ok]
    uniform = {tuple(r.params[k] for k in shape_keys): r for r in moe
               if r.params["workload"] == "uniform" and r.params["mitigation"] == "none"}
    rows = []
    for r in moe:
        base = uniform.get(tuple(r.params[k] for k in shape_keys))
        rows.append({
            "case_id": r.case_id, "label": f"{workload_label(r)} {mitigation_label(r)}", "workload": r.params["workload"],
            "mitigation": mitigation_label(r).split("+")[0], "drift_steps": r.params.get("drift_steps", 0),
            "tokens_per_s": r.metrics["tokens_per_s"],
            "rel_throughput": r.metrics["tokens_per_s"] / base.metrics["tokens_per_s"] if base else float("nan"),
            "rel_throughput_p50": (r.metrics.get("tokens_per_s_p50", nan) / base.metrics.get("tokens_per_s_p50", nan)
                                   if base else float("nan")),
            "paired_rel_throughput": r.metrics.get("paired_rel_throughput", nan),
            "paired_rel_throughput_p50": r.metrics.get("paired_rel_throughput_p50", nan),
            "rank_max_over_mean": r.metrics["rank_max_over_mean"],
            "rank_balancedness": r.metrics["rank_balancedness"],
            "dropped_fraction": r.metrics["dropped_fraction"],
        })
    return rows


def cmd_report(args) -> int:
    declare_inputs(run_inputs([args.run_dir]))  # --json may not replace the run's files
    rows = _relative(load_whole(args.run_dir).records)
    if not rows:
        print_error("moe-report", f"{args.run_dir} holds no passing moe_a2a records")
        return 2
    table = Table(title=f"moe_a2a measured in {args.run_dir}: throughput relative to uniform — over the uniform "
                        "case of the same shape in this run (two records), and over the case's own uniform twin "
                        "(paired=1, steps interleaved A B A B)", title_justify="left")
    for col in ("case", "tokens/s (mean step)", "vs uniform case (mean)", "vs uniform case (p50)",
                "vs paired twin (mean)", "vs paired twin (p50)", "rank balancedness (mean/max)", "dropped", "article"):
        table.add_column(col, justify="right")
    for row in rows:
        claim = ""
        if row["workload"] == "hot" and row["mitigation"] == "none":
            claim = "A1.moe_skew 47 %"
        elif row["mitigation"].startswith("adaptive"):
            claim = "A1.moe_adaptive 89 %"
        elif row["mitigation"] == "replicate/naive":
            claim = "A1.moe_replica: worse"
        table.add_row(row["label"], f"{row['tokens_per_s']:.0f}", _fmt_pct(row["rel_throughput"]),
                      _fmt_pct(row["rel_throughput_p50"]), _fmt_pct(row["paired_rel_throughput"]),
                      _fmt_pct(row["paired_rel_throughput_p50"]), f"{row['rank_balancedness']:.2f}", f"{row['dropped_fraction']:.1%}", claim)
    wide_console().print(table)
    if args.json:
        # A ratio this run cannot give (no uniform case of the shape, a case without a paired twin)
        # is NaN in the table's arithmetic and null in JSON, which cannot hold NaN.
        atomic.write_json(args.json, atomic.finite_or_null(rows)[0], sort_keys=False)
    return 0
