"""A transformer-like ONNX model whose node names do not mark its blocks consistently, for the
graph view's structural block detection (issue 26): in each of LAYERS blocks the norm's nodes are
named /model/layers/N/ln1/* and the rest /model/layers.N/*, as some exporters name them.

    python onnx_mixed_gen.py OUT.onnx LAYERS

Prints {"nodes": N, "per_layer": K}. Checked with onnx.checker.
"""
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gen(out, layers):
    rng = np.random.default_rng(1)
    d = 16
    nodes, inits = [], []
    x = "hidden"
    per_layer = 0
    for i in range(layers):
        ln = f"/model/layers/{i}/ln1"
        p = f"/model/layers.{i}"
        wq, wo, w1, w2 = (f"model.layers.{i}.{k}.weight" for k in ("attn.q", "attn.o", "mlp.fc1", "mlp.fc2"))
        for w, shape in ((wq, (d, d)), (wo, (d, d)), (w1, (d, 4 * d)), (w2, (4 * d, d))):
            inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), w))
        g = f"model.layers.{i}.ln1.weight"
        inits.append(numpy_helper.from_array(np.ones(d, np.float32), g))
        start = len(nodes)
        n = lambda op, ins, outs, nm, **kw: nodes.append(helper.make_node(op, ins, outs, name=nm, **kw))
        n("ReduceMean", [x], [f"{ln}/mean"], f"{ln}/ReduceMean", axes=[-1], keepdims=1)
        n("Sub", [x, f"{ln}/mean"], [f"{ln}/c"], f"{ln}/Sub")
        n("Mul", [f"{ln}/c", f"{ln}/c"], [f"{ln}/sq"], f"{ln}/Pow")
        n("ReduceMean", [f"{ln}/sq"], [f"{ln}/var"], f"{ln}/ReduceMean_1", axes=[-1], keepdims=1)
        n("Add", [f"{ln}/var", "/model/eps"], [f"{ln}/ve"], f"{ln}/Add")
        n("Sqrt", [f"{ln}/ve"], [f"{ln}/sd"], f"{ln}/Sqrt")
        n("Div", [f"{ln}/c", f"{ln}/sd"], [f"{ln}/n"], f"{ln}/Div")
        n("Mul", [f"{ln}/n", g], [f"{ln}/out"], f"{ln}/Mul")
        n("MatMul", [f"{ln}/out", wq], [f"{p}/q"], f"{p}/attn/q/MatMul")
        n("Softmax", [f"{p}/q"], [f"{p}/a"], f"{p}/attn/Softmax", axis=-1)
        n("Mul", [f"{p}/a", f"{p}/q"], [f"{p}/ctx"], f"{p}/attn/Mul")
        n("MatMul", [f"{p}/ctx", wo], [f"{p}/o"], f"{p}/attn/o/MatMul")
        n("Add", [x, f"{p}/o"], [f"{p}/h"], f"{p}/Add")
        n("MatMul", [f"{p}/h", w1], [f"{p}/f1"], f"{p}/mlp/fc1/MatMul")
        n("Sigmoid", [f"{p}/f1"], [f"{p}/sg"], f"{p}/mlp/act/Sigmoid")
        n("Mul", [f"{p}/f1", f"{p}/sg"], [f"{p}/act"], f"{p}/mlp/act/Mul")
        n("MatMul", [f"{p}/act", w2], [f"{p}/f2"], f"{p}/mlp/fc2/MatMul")
        n("Add", [f"{p}/h", f"{p}/f2"], [f"{p}/out"], f"{p}/Add_1")
        per_layer = len(nodes) - start
        x = f"{p}/out"
    inits.append(numpy_helper.from_array(np.array(1e-5, np.float32), "/model/eps"))
    inits.append(numpy_helper.from_array(rng.standard_normal((d, 32)).astype(np.float32), "lm_head.weight"))
    nodes.append(helper.make_node("MatMul", [x, "lm_head.weight"], ["logits"], name="/lm_head/MatMul"))
    graph = helper.make_graph(nodes, "mixed-names", [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", d])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 32])], inits)
    model = helper.make_model(graph, producer_name="tensorlane-tests", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)
    print(json.dumps({"nodes": len(nodes), "per_layer": per_layer}))


if __name__ == "__main__":
    gen(sys.argv[1], int(sys.argv[2]))
