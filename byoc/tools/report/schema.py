"""The partition report's JSON schema (:data:`REPORT_SCHEMA`, version :data:`SCHEMA_VERSION`), its formats and
the names it gives the host and a node that left no op."""

from __future__ import annotations

SCHEMA_VERSION = 1


FORMATS = ("text", "json", "dot", "html")


HOST = "host"


NO_OP = "none"  # an ONNX node that left no op to run (folded or removed at import)


_TENSOR = {
    "type": "object",
    "required": ["name", "shape", "dtype", "bytes"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": ["integer", "string"]}},  # a symbolic dim is its text
        "dtype": {"type": "string"},
        "bytes": {"type": ["integer", "null"]},  # null when a dim is symbolic
    },
}


_REASONS = {"type": "object", "additionalProperties": {"type": "string"}}


REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "byoc partition report",
    "type": "object",
    "required": ["schema_version", "model", "vendors", "target", "policies", "summary",
                 "partitions", "host_ops", "nodes", "inputs", "outputs"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "model": {"type": "string"},
        "vendors": {"type": "array", "items": {"type": "string"}},
        "target": {"type": "string"},
        "policies": {
            "type": "object",
            "required": ["min_ops", "keep_on_host"],
            "properties": {"min_ops": {"type": "integer"},
                           "keep_on_host": {"type": "array", "items": {"type": "string"}}},
        },
        "summary": {
            "type": "object",
            "required": ["onnx_nodes", "total_ops", "offloaded_ops", "host_ops", "partitions"],
            "properties": {
                "onnx_nodes": {"type": "integer"},
                "total_ops": {"type": "integer"},
                "offloaded_ops": {"type": "object", "additionalProperties": {"type": "integer"}},
                "host_ops": {"type": "integer"},
                "partitions": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
        "partitions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "vendor", "onnx_nodes", "ops", "rules", "inputs", "outputs",
                             "constant_bytes", "boundary_bytes"],
                "properties": {
                    "name": {"type": "string"},
                    "vendor": {"type": "string"},
                    "onnx_nodes": {"type": "array", "items": {"type": "string"}},
                    "ops": {"type": "integer"},
                    "rules": {"type": "array", "items": {"type": "string"}},
                    "inputs": {"type": "array", "items": _TENSOR},
                    "outputs": {"type": "array", "items": _TENSOR},
                    "constant_bytes": {"type": "integer"},
                    "boundary_bytes": {"type": "integer"},
                    "split": {"type": "string"},
                    # a static-shape vendor's partition with symbolic dims: one entry per size it is compiled for
                    # ("refused": why its partition check refused that size, which then runs on the host)
                    "specializations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["sizes", "symbol"],
                            "properties": {"sizes": {"type": "object", "additionalProperties": {"type": "integer"}},
                                           "symbol": {"type": "string"}, "refused": {"type": "string"}},
                        },
                    },
                    # what a call at a size with no specialization does: runs on the host, or is refused
                    "other_sizes": {"enum": ["host", "refuse"]},
                },
            },
        },
        # each Loop the host runs: its body's partitions and the body's nodes with host ops (their names
        # "<loop>/<node>"); absent when the model has none
        "loops": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["node", "partitions", "host_nodes"],
                "properties": {"node": {"type": "string"}, "partitions": {"type": "array", "items": {"type": "string"}},
                               "host_nodes": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "fallbacks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["vendor", "partition", "ops", "reason"],
                "properties": {"vendor": {"type": "string"}, "partition": {"type": "string"},
                               "ops": {"type": "integer"}, "reason": {"type": "string"}},
            },
        },
        # per vendor with a device memory: the bytes its partitions copy to the device and to the host per run
        # (null: a dim is symbolic), the copies values kept on the device save, and the weights copied there once
        "device": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["memory", "partitions", "to_device_bytes", "to_host_bytes", "kept_bytes",
                             "weights_bytes"],
                "properties": {
                    "memory": {"type": "string"},
                    "partitions": {"type": "array", "items": {
                        "type": "object",
                        "required": ["name", "to_device_bytes", "to_host_bytes", "kept_bytes", "weights_bytes",
                                     "reads_on_device", "leaves_on_device"]}},
                },
            },
        },
        "host_ops": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["op_type", "nodes", "ops", "reasons"],
                "properties": {
                    "op_type": {"type": "string"},
                    "nodes": {"type": "array", "items": {"type": "string"}},
                    "ops": {"type": "integer"},
                    "reasons": _REASONS,
                },
            },
        },
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "op_type", "placement", "inputs", "outputs", "detail"],
                "properties": {
                    "name": {"type": "string"},
                    "op_type": {"type": "string"},
                    "placement": {"type": "string"},
                    "vendor": {"type": ["string", "null"]},
                    "inputs": {"type": "array", "items": {"type": "string"}},
                    "outputs": {"type": "array", "items": {"type": "string"}},
                    "detail": {"type": "string"},
                    # present (true) when the node is the core of a quantized node unit a vendor took as one op
                    "quantized_unit": {"const": True},
                },
            },
        },
        "inputs": {"type": "array", "items": _TENSOR},
        "outputs": {"type": "array", "items": _TENSOR},
        "prepared": {
            "type": "object",
            "required": ["simplifier", "nodes"],
            "properties": {
                "simplifier": {"type": "string"},
                "nodes": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "memory": {
            "type": "object",
            "required": ["planned_bytes", "lower_bound_bytes", "model_lower_bound_bytes", "planned_source",
                         "lower_bound_source", "model_lower_bound_source", "scope"],
            "properties": {
                # present after a build (--verify): what each partition's vendor runtime reports
                "runtimes": {"type": "array", "items": {
                    "type": "object",
                    "required": ["partition", "vendor", "workspace_bytes", "constant_bytes"]}},
                # an int, or a formula of the symbolic dims that have no upper bound ("768*batch*seq")
                "total_planned_bytes": {"type": ["integer", "string"]},
                "at_bounds": {"type": "object", "additionalProperties": {"type": "integer"}},
                # present with --memory: what a fresh process gained by loading the exported library and a run
                "resident": {"type": "object",
                             "required": ["load_bytes", "run_bytes", "peak_bytes", "runtimes", "source"]},
            },
        },
        "verify": {"type": "object", "required": ["status"]},
        # present after measured placement: each rule-based partition's ms per place, where it went and why
        "placement": {
            "type": "object",
            "required": ["decisions", "candidate_builds", "min_speedup"],
            "properties": {"decisions": {"type": "array", "items": {
                "type": "object",
                "required": ["partition", "vendor", "onnx_nodes", "times_ms", "estimated", "place", "reason"]}}},
        },
        # present when a vendor option is not its default (or an environment variable set it):
        # vendor -> option -> {value, default, source[, note]}
        "vendor_options": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {
                "type": "object",
                "required": ["value", "default", "source"],
                "properties": {"source": {"enum": ["default", "vendor", "build", "environment"]},
                               "note": {"type": "string"}}}}},
    },
}
