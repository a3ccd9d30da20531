"""Compile the small decoder for dnnl, generate 16 tokens greedily with byoc.Generator, and check them against
onnxruntime's own greedy loop (each call's present outputs fed back as the next call's past)."""

import numpy as np
import onnxruntime as ort

import byoc

MODEL = "decoder.onnx"
PROMPT = [3, 17, 101, 42, 77]
NEW_TOKENS = 16


def onnxruntime_greedy(path, prompt, new_tokens):
    """The reference: onnxruntime, the cache starting empty and growing by the call's tokens."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in pasts}
    ids, length, tokens = np.array([prompt], np.int64), 0, []
    while len(tokens) < new_tokens:
        total = length + ids.shape[1]
        outputs = dict(zip(names, session.run(names, {
            "input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(length, total, dtype=np.int64)[None], **past})))
        tokens.append(int(outputs["logits"][0, -1].argmax()))
        past = {name: outputs[name.replace("past_key_values", "present")] for name in past}
        ids, length = np.array([[tokens[-1]]], np.int64), total
    return tokens


artifact = byoc.compile(MODEL, vendors=["dnnl"])
generator = byoc.Generator(artifact)
tokens = generator.generate([PROMPT], max_new_tokens=NEW_TOKENS)[0].tolist()
print("byoc:       ", tokens)
reference = onnxruntime_greedy(MODEL, PROMPT, NEW_TOKENS)
print("onnxruntime:", reference)
print("equal:", tokens == reference)
print("padded:", generator.padded)
print(f"cache: {generator.length} tokens, {generator.cache_bytes} bytes")

# The same loop by hand: prefill() takes the prompt, step() the chosen token; both return the logits of the
# last position, [batch, vocab]. Any sampling rule can replace the argmax.
logits = generator.prefill([PROMPT])
chosen = [int(logits[0].argmax())]
while len(chosen) < NEW_TOKENS:
    logits = generator.step([chosen[-1]])
    chosen.append(int(logits[0].argmax()))
print("step by step:", chosen == tokens)
