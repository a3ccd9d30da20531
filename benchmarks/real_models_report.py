"""The real-model suite's report (benchmarks/real_models.py): the results as a Markdown table, with the op
types left on the host, the failures and the build warnings (``print_table``), and the counts of models that
import and that match onnxruntime (``summarize``)."""

from __future__ import annotations

RTOL = 1e-3  # what tests/test_real_models.py accepts


# -- output ------------------------------------------------------------------------------
def _fmt(value, spec, unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def _parts(config: dict) -> str:
    per = config.get("partitions_per_vendor")
    if config.get("partitions") is None:
        return "-"
    if not per:
        return str(config["partitions"])
    return f"{config['partitions']} (" + ", ".join(f"{v} {n}" for v, n in per.items()) + ")"


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def print_table(report: dict) -> None:
    s = report["settings"]
    int8 = (" Models quantized by onnxruntime.quantization (QDQ u8/s8); the error is against onnxruntime running "
            "each op as ONNX defines it, the latency against its int8 kernels.") if s.get("int8") else ""
    print(f"## Real models (max rel err = max|byoc - ort| / max|ort| over each output; latency: median of "
          f"{s['runs']} rounds of {s.get('calls', 1)} calls after {s['warmup']} warm-up rounds, a "
          f"{s.get('settle_ms', 0):g} ms pause before each, each configuration in its own process, "
          f"onnxruntime with 2 threads).{int8}")
    print(f"Machine class: {report['machine'].get('class', 'not recorded')}.")
    print()
    print("| model | config | import | partitions | offloaded / host ops | max rel err | compile | latency | "
          "onnxruntime | vs onnxruntime |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, entry in report["models"].items():
        if entry["status"] != "ok":
            print(f"| {name} | - | {_cell(entry['status'] + ': ' + entry['why'])} | | | | | | | |")
            continue
        ort = entry.get("onnxruntime", {})
        ort_ms = _fmt(ort.get("latency_ms"), ".2f", " ms") if ort.get("status") == "ok" else ort.get("status", "-")
        for key, c in entry["configs"].items():
            if c["status"] == "skipped":
                print(f"| {name} | {key} | skipped: {_cell(c['why'])} | | | | | | | |")
                continue
            imp = c.get("import", "-")
            ops = "-" if c.get("offloaded_ops") is None else f"{c['offloaded_ops']} / {c['host_ops']}"
            err = _fmt(c.get("max_rel_err"), ".1e")
            if c.get("max_rel_err") is not None and not c["max_rel_err"] <= RTOL:
                err += f" (> {RTOL:g})"
            if entry.get("reference_constant") and c.get("max_rel_err") is not None:
                err += " (ort output constant)"
            if c["status"] not in ("ok", "import failed"):
                err = f"{c['status']}: {_cell(c.get('why', ''))}"
            latency = _fmt(c.get("latency_ms"), ".2f", " ms") if "latency_ms" in c else c.get("latency", "-")
            print(f"| {name} | {key} | {_cell(imp)} | {_parts(c)} | {ops} | {err} | "
                  f"{_fmt(c.get('compile_s'), '.1f', ' s')} | {_cell(latency)} | "
                  f"{ort_ms if 'latency_ms' in c else '-'} | {_fmt(c.get('vs_onnxruntime'), '.2f', 'x')} |")
    print()
    print(f"Models: {len(report['models'])}; import ok: {report['summary']['import_ok']}; "
          f"every configuration within {RTOL:g}: {report['summary']['within_rtol']}")
    failures = []
    for name, entry in report["models"].items():
        by_error: dict = {}  # one line per distinct error, naming the configurations that hit it
        for key, c in entry.get("configs", {}).items():
            if c["status"] not in ("ok", "skipped"):
                by_error.setdefault(c.get("why") or c.get("import"), []).append(key)
        failures += [f"- {name} ({', '.join(keys)}): {why}" for why, keys in by_error.items()]
    failures += [f"- {name}: {e['status']}: {e['why']}" for name, e in report["models"].items() if e["status"] != "ok"]
    warned = [f"- {name} {key}: {w}" for name, entry in report["models"].items()
              for key, c in entry.get("configs", {}).items() for w in c.get("warnings", [])]
    host = [f"- {name} {key}: {', '.join(c['host_op_types'])}" for name, entry in report["models"].items()
            for key, c in entry.get("configs", {}).items() if c.get("host_op_types")]
    if host:
        print()
        print("## ONNX op types left on the host")
        print()
        print("\n".join(host))
    if failures:
        print()
        print("## Failures")
        print()
        print("\n".join(failures))
    if warned:
        print()
        print("## Build warnings")
        print()
        print("\n".join(warned))


def summarize(report: dict) -> dict:
    models = report["models"]
    import_ok = [n for n, e in models.items()
                 if e["status"] == "ok" and any(c.get("import") == "ok" for c in e["configs"].values())]
    within = [n for n, e in models.items() if e["status"] == "ok" and e["configs"] and all(
        c["status"] == "skipped" or (c["status"] == "ok" and c.get("max_rel_err", 1) <= RTOL)
        for c in e["configs"].values())]
    return {"import_ok": f"{len(import_ok)}/{len(models)}", "within_rtol": f"{len(within)}/{len(models)}",
            "models_import_ok": import_ok, "models_within_rtol": within}
