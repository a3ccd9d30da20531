"""Measure graph simplifiers on real models: does TVM import after them, how long, are names kept.

The figures in docs/design.md ("Model preparation") come from this script.
It needs onnxslim besides byoc's own dependencies, and the PyPI wheels
unzipped under the cache folder (first argument ``--cache DIR``, default
``$BYOC_MODEL_CACHE`` or /work/model_cache)::

    pip install onnxslim
    cd DIR && pip download --no-deps rapidocr-onnxruntime==1.4.4 silero-vad==6.2.3 -d .
    mkdir -p rapidocr silero && (cd rapidocr && unzip -oq ../rapidocr_onnxruntime-1.4.4-*.whl) \
        && (cd silero && unzip -oq ../silero_vad-6.2.3-*.whl)
    python benchmarks/simplifiers.py [--cache DIR] none onnxsim onnxslim byoc

One JSON line per model and tool: time of the simplifier, node counts,
nodes whose name is a user node's, whether input/output names survived, and
whether byoc's op check and TVM's import succeed on the result (and in how
long). ``byoc`` is :func:`byoc.pipeline.frontend.prepare.prepare` itself.
"""
import contextlib
import glob
import io
import json
import os
import sys
import time
import warnings

import onnx
from byoc.pipeline.frontend import check, load, onnx_model, relax_import, shapes

L = os.path.dirname(onnx.__file__) + "/backend/test/data/light/"
C = os.environ.get("BYOC_MODEL_CACHE", "/work/model_cache").rstrip("/") + "/"
if len(sys.argv) > 2 and sys.argv[1] == "--cache":
    C = sys.argv[2].rstrip("/") + "/"
    del sys.argv[1:3]
MODELS = [(p, {}) for p in sorted(glob.glob(L + "*.onnx"))] + [
    (C + "rapidocr/rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 640, 640]}),
    (C + "rapidocr/rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]}),
    (C + "rapidocr/rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}),
    (C + "silero/silero_vad/data/silero_vad_16k_op15.onnx", {"input": [1, 512], "state": [2, 1, 128]}),
    (C + "silero/silero_vad/data/silero_vad_16k_sequence.onnx", {"input": [4, 576]}),
    (C + "silero/silero_vad/data/silero_vad_openvino_16k.onnx", {}),
]


def simp_none(m):
    return m


def simp_onnxsim(m):
    import onnxsim
    out, ok = onnxsim.simplify(m, check_n=0, certify=False)
    return out


def simp_onnxslim(m):
    import onnxslim
    return onnxslim.slim(m)


def simp_byoc(m):
    from byoc.pipeline.frontend.prepare import prepare
    return prepare(m).model


def base(path, shapes):
    m = load.load_model(path)
    onnx_model.name_nodes(m.graph)
    check.sort_nodes(m.graph)
    if shapes:
        shapes.apply_input_shapes(m, shapes)
    return check.check_model(m)


def run(path, shapes, name, fn):
    m = base(path, shapes)
    user_names = {n.name for n in m.graph.node}
    ios = ([i.name for i in m.graph.input], [o.name for o in m.graph.output])
    t = time.perf_counter()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            with warnings.catch_warnings(record=True) as caught:
                c = onnx.ModelProto()
                c.CopyFrom(m)
                p = fn(c)
        dt = time.perf_counter() - t
    except Exception as e:  # noqa: BLE001 - the simplifiers raise every kind of error: a row
        return dict(model=os.path.basename(path), simp=name, error=f"simplify: {type(e).__name__}: {str(e)[:80]}")
    warned = [str(w.message)[:200] for w in caught if issubclass(w.category, UserWarning)]
    kept = sum(1 for n in p.graph.node if n.name in user_names)
    io_ok = ([i.name for i in p.graph.input if i.name in ios[0]] == [i.name for i in p.graph.input]) and [o.name for o in p.graph.output] == ios[1]
    res = dict(model=os.path.basename(path), simp=name, time=round(dt, 2), nodes_before=len(m.graph.node),
               nodes_after=len(p.graph.node), names_kept=f"{kept}/{len(p.graph.node)}", io_names=io_ok, warned=warned)
    try:
        p = check.check_model(p)
        inputs = shapes.model_inputs(p, {})[0]
        check.check_supported_ops(p.graph)
        t = time.perf_counter()
        mod, node_of = relax_import.to_relax(p, inputs)[:2]
        res["imports"] = "yes"
        res["import_s"] = round(time.perf_counter() - t, 2)
    except Exception as e:  # noqa: BLE001 - any failure to import is the result
        res["imports"] = f"no: {type(e).__name__}: {str(e)[:150]}"
    return res


if __name__ == "__main__":
    which = sys.argv[1:] or ["none", "onnxsim", "onnxslim"]
    fns = {"byoc": lambda m: simp_byoc(m), "none": simp_none, "onnxsim": simp_onnxsim, "onnxslim": simp_onnxslim}
    for path, shapes in MODELS:
        for name in which:
            print(json.dumps(run(path, shapes, name, fns[name])), flush=True)
