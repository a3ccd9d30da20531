"""benchmarks/run.py's report: issue 7's goal figures, each for the vendor set that does best on it
(``evaluate_goals``), and the results as Markdown tables (``print_tables``)."""

from __future__ import annotations


# -- goals ------------------------------------------------------------------------------
def _goal(goal: str, target: str, best: dict | None, met) -> dict:
    """One goal line; ``best`` holds vendors, value, shown (or None: not measured)."""
    if best is None:
        return {"goal": goal, "target": target, "vendors": None, "value": None, "measured": "not measured",
                "met": None}
    return {"goal": goal, "target": target, **best, "met": met}


def _per_vendor_set(report: dict, field: str) -> dict:
    """byoc vendor set -> {model: value of ``field``} over the models of the run."""
    sets: dict = {}
    for model, configs in report["models"].items():
        for key, entry in configs.items():
            if key.startswith("byoc["):
                sets.setdefault(key[5:-1], {})[model] = entry.get(field)
    return sets


def _every_model_goal(report: dict, goal: str, target: str, field: str, higher_is_better: bool,
                      threshold: float, models: list, spec: str, extra: str = "") -> dict:
    """A goal over every model (``models``: those where it can be measured) for the best vendor set.

    The worst model of a set decides; a set measured on fewer models ranks after complete ones.
    """
    candidates = []
    for vendors, values in _per_vendor_set(report, field).items():
        measured = {m: v for m, v in values.items() if v is not None}
        if not measured:
            continue
        missing = sorted(set(models) - set(measured))
        worst = min(measured.values()) if higher_is_better else max(measured.values())
        label = "least" if higher_is_better else "worst"
        shown = f"{label} {worst:{spec}}x (" + ", ".join(f"{m} {v:{spec}}x" for m, v in measured.items()) + ")"
        if missing:
            shown += f"; not measured on {', '.join(missing)}"
        shown += extra
        rank = -worst if higher_is_better else worst
        candidates.append((bool(missing), rank, {"vendors": vendors, "value": worst, "measured": shown}))
    if not candidates:
        return _goal(goal, target, None, None)
    incomplete, _, best = min(candidates, key=lambda c: c[:2])
    value = best["value"]
    met = not incomplete and (value >= threshold if higher_is_better else value <= threshold)
    return _goal(goal, target, best, met)


def _latency_goal(report: dict) -> dict:
    return _every_model_goal(report, "byoc / onnxruntime latency on every model", "<= 1.0", "vs_onnxruntime",
                             False, 1.0, list(report["models"]), ".2f")


def _speedup_goal(report: dict) -> dict:
    plain = [m for m, c in report["models"].items() if c.get("plain_tvm", {}).get("latency_ms") is not None]
    unmeasured = sorted(set(report["models"]) - set(plain))
    extra = f"; plain TVM not measured on {', '.join(unmeasured)}" if unmeasured else ""
    return _every_model_goal(report, "speedup vs plain TVM on every model", ">= 3x", "speedup_vs_plain_tvm",
                             True, 3.0, plain, ".1f", extra)


def _boundary_goal(report: dict) -> dict:
    goal, target = "boundary overhead per offloaded call", "< 2 us"
    if not report["boundary"]:
        return _goal(goal, target, None, None)
    row = min(report["boundary"], key=lambda r: r["us_per_call"])
    return _goal(goal, target, {"vendors": row["vendors"], "value": row["us_per_call"],
                                "measured": f"{row['us_per_call']:.2f} us"}, row["us_per_call"] < 2.0)


def _scaling_goal(report: dict) -> dict:
    goal, target = "partitioning 10k ops vs TVM's passes alone", "<= 1.2x"
    rows = [r for r in report["scaling"] if r["status"] == "ok"]
    if not rows:
        return _goal(goal, target, None, None)
    ops = 10000 if any(r["ops"] == 10000 for r in rows) else max(r["ops"] for r in rows)
    at = [r for r in rows if r["ops"] == ops]
    worst = max(r["ratio"] for r in at)
    shown = f"worst {worst:.2f}x (" + ", ".join(f"{r['graph']} {r['ratio']:.2f}x" for r in at) + ")"
    if ops != 10000:
        shown += f"; at {ops} ops, 10k not measured"
    return _goal(goal, target, {"vendors": at[0]["vendors"], "value": worst, "measured": shown}, worst <= 1.2)


def evaluate_goals(report: dict) -> list:
    """Issue 7's goal figures, each for the vendor set that does best on it."""
    return [_latency_goal(report), _speedup_goal(report), _boundary_goal(report), _scaling_goal(report)]


# -- output ---------------------------------------------------------------------------
def _fmt(value, spec=".1f", unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def _bytes(n):
    if n is None:
        return "-"
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def print_tables(report: dict) -> None:
    settings = report["settings"]
    print("## Latency (median of %d rounds of %d calls after %d warm-up rounds, a %g ms pause before each; "
          "each configuration in its own process; onnxruntime with 2 threads)"
          % (settings["runs"], settings.get("calls", 1), settings["warmup"], settings.get("settle_ms", 0)))
    print(f"Machine class: {report['machine'].get('class', 'not recorded')}.")
    print()
    print("| model | config | latency | vs onnxruntime | speedup vs plain TVM | compile | partitions | "
          "planned memory in all | model lower bound | max abs err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, configs in report["models"].items():
        for key, c in configs.items():
            if c.get("status") != "ok":
                print(f"| {name} | {key} | {c['status']}: {c['why']} | | | | | | | |")
                continue
            mem = c.get("memory", {})
            print(f"| {name} | {key} | {_fmt(c.get('latency_ms'), '.2f', ' ms')} | "
                  f"{_fmt(c.get('vs_onnxruntime'), '.2f', 'x')} | {_fmt(c.get('speedup_vs_plain_tvm'), '.2f', 'x')} | "
                  f"{_fmt(c.get('compile_s'), '.1f', ' s')} | {c.get('partitions', '-')} | "
                  f"{_bytes(mem.get('total_planned_bytes'))} | {_bytes(mem.get('model_lower_bound_bytes'))} | "
                  f"{_fmt(c.get('max_abs_err_vs_onnxruntime'), '.2g')} |")
    shared = [(name, key, row) for name, configs in report["models"].items() for key, c in configs.items()
              for row in c.get("in_process", [])]
    if shared:
        print()
        print("## In one process: byoc next to another runtime's thread pool (calls alternating, median of "
              "%d; onnxruntime with 2 threads)" % (max(settings["runs"], 10) * 3))
        print()
        print("| model | config | peer | byoc alone | byoc after the peer's call | ratio | peer alone | "
              "peer after byoc's call |")
        print("|---|---|---|---|---|---|---|---|")
        for name, key, r in shared:
            print(f"| {name} | {key} | {r['peer']} | {r['byoc_alone_ms']:.2f} ms | {r['byoc_alternating_ms']:.2f} ms | "
                  f"{r['byoc_alternating_ms'] / r['byoc_alone_ms']:.2f}x | {r['peer_alone_ms']:.2f} ms | "
                  f"{r['peer_alternating_ms']:.2f} ms |")
    print()
    print("## Partition scaling: byoc.partition vs FuseOpsByPattern + MergeCompositeFunctions alone")
    print()
    print("| graph | ops | vendors | TVM passes | byoc annotate+partition | ratio | partitions |")
    print("|---|---|---|---|---|---|---|")
    for r in report["scaling"]:
        if r["status"] != "ok":
            print(f"| {r['graph']} | {r['ops']} | {r['vendors']} | {r['status']}: {r['why']} | | | |")
        else:
            print(f"| {r['graph']} | {r['ops']} | {r['vendors']} | {r['tvm_s']:.3f} s | {r['byoc_s']:.3f} s | "
                  f"{r['ratio']:.2f}x | {r['partitions']} |")
    print()
    print("## Boundary overhead: chain alternating offloaded Add / host Atan vs the same chain all on host")
    print()
    print("| vendors | ops | partitions | chain | all-host chain | per offloaded call |")
    print("|---|---|---|---|---|---|")
    for r in report["boundary"]:
        print(f"| {r['vendors']} | {r['ops']} | {r['partitions']} | {r['chain_us']:.1f} us | "
              f"{r['host_chain_us']:.1f} us | {r['us_per_call']:.2f} us |")
    print()
    print("## Skipped")
    print()
    for s in report["skipped"] or [{"what": "nothing", "why": ""}]:
        print(f"- {s['what']}" + (f": {s['why']}" if s["why"] else ""))
    print()
    print("## Goals (issue 7), each for the best vendor set")
    print()
    print("| goal | target | best vendor set | measured | status |")
    print("|---|---|---|---|---|")
    for g in report["goals"]:
        status = "not measured" if g["met"] is None else ("met" if g["met"] else "missed")
        print(f"| {g['goal']} | {g['target']} | {g['vendors'] or '-'} | {g['measured']} | {status} |")
