"""The `onnx` library's view of an ONNX graph, for the graph tests of the core's
onnx_graph::read_graph (tests/js/onnx_graph.test.mjs, tests/browser/compare_graph.test.mjs) and
scripts/bench_graph.mjs.

    python onnx_graph_ref.py gen OUT.onnx LAYERS
        Writes a transformer-like model with onnx.helper: LAYERS repeated blocks named
        /model/layers.N/... (about 12 nodes each: LayerNorm-like Reduce/Sub/Mul/Add, MatMul with
        an initializer weight, Softmax, Gelu-like Erf chain, a Reshape with an int64 shape
        initializer), node attributes of every common kind (int, float, string, ints, floats, a
        tensor, a subgraph in an If), a custom-domain node, symbolic input dims, and checks it
        with onnx.checker. Prints {"nodes": N}.

    python onnx_graph_ref.py ref MODEL.onnx
        Prints the graph as onnx.load (without external data) sees it, in the JSON shape of
        reader.graph(): name, ir_version, producer_name, producer_version, opset_import,
        inputs/outputs [{name, elem_type, shape}], initializers, nodes [{name, op_type, domain,
        inputs, outputs, attributes: [{name, kind, value}]}] where `value` is the attribute's
        value for int, float and ints (null for other kinds).
"""
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gen(out, layers):
    rng = np.random.default_rng(0)
    d = 16
    nodes, inits = [], []
    x = "input_ids_embeds"
    inits.append(numpy_helper.from_array(np.array([-1, d], np.int64), "/model/shape_2d"))
    for i in range(layers):
        p = f"/model/layers.{i}"
        w = f"model.layers.{i}.mlp.weight"
        inits.append(numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32), w))
        g = f"model.layers.{i}.norm.weight"
        inits.append(numpy_helper.from_array(np.ones(d, np.float32), g))
        n = lambda op, ins, outs, nm, **kw: nodes.append(helper.make_node(op, ins, outs, name=f"{p}/{nm}", **kw))
        n("ReduceMean", [x], [f"{p}/mean"], "norm/ReduceMean", axes=[-1], keepdims=1)
        n("Sub", [x, f"{p}/mean"], [f"{p}/centered"], "norm/Sub")
        n("Mul", [f"{p}/centered", g], [f"{p}/normed"], "norm/Mul")
        n("MatMul", [f"{p}/normed", w], [f"{p}/proj"], "mlp/MatMul")
        n("Softmax", [f"{p}/proj"], [f"{p}/attn"], "attn/Softmax", axis=-1)
        n("Mul", [f"{p}/attn", f"{p}/proj"], [f"{p}/gated"], "attn/Mul")
        n("Div", [f"{p}/gated", "/model/sqrt2"], [f"{p}/scaled"], "gelu/Div")
        n("Erf", [f"{p}/scaled"], [f"{p}/erf"], "gelu/Erf")
        n("Add", [f"{p}/erf", "/model/one"], [f"{p}/erf1"], "gelu/Add")
        n("Mul", [f"{p}/gated", f"{p}/erf1"], [f"{p}/gelu"], "gelu/Mul")
        n("Reshape", [f"{p}/gelu", "/model/shape_2d"], [f"{p}/flat"], "Reshape")
        n("Add", [x, f"{p}/flat"], [f"{p}/out"], "residual/Add")
        x = f"{p}/out"
    inits.append(numpy_helper.from_array(np.array(2**0.5, np.float32), "/model/sqrt2"))
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), "/model/one"))
    # Attribute kinds: float, string, floats, tensor; a subgraph in an If; a custom domain.
    nodes.append(helper.make_node("LeakyRelu", [x], ["leaky"], name="/head/LeakyRelu", alpha=0.125))
    nodes.append(helper.make_node("Constant", [], ["const_t"], name="/head/Constant",
                                  value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")))
    nodes.append(helper.make_node("CustomScale", ["leaky"], ["custom"], name="/head/CustomScale", domain="com.example",
                                  mode="fast", scales=[0.5, 2.0], note="x" * 300))
    then_g = helper.make_graph([helper.make_node("Identity", ["custom"], ["t_out"])], "then",
                               [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["custom"], ["e_out"]), ], "else",
                               [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    nodes.append(helper.make_node("ReduceSum", ["custom"], ["s"], name="/head/ReduceSum", keepdims=0))
    nodes.append(helper.make_node("Greater", ["s", "/model/one"], ["cond"], name="/head/Greater"))
    nodes.append(helper.make_node("If", ["cond"], ["logits"], name="/head/If", then_branch=then_g, else_branch=else_g))
    graph = helper.make_graph(
        nodes, "tensorlane-graph-test",
        [helper.make_tensor_value_info("input_ids_embeds", TensorProto.FLOAT, ["batch", d])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("const_t", TensorProto.FLOAT, [2, 3])],
        inits)
    model = helper.make_model(graph, producer_name="tensorlane-tests", producer_version="1.0",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    onnx.save(model, out)
    print(json.dumps({"nodes": len(nodes)}))


def ref(path):
    m = onnx.load(path, load_external_data=False)
    g = m.graph

    def vi(v):
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        shape = None
        if t is not None and t.HasField("shape"):
            shape = [dd.dim_value if dd.HasField("dim_value") else (dd.dim_param if dd.HasField("dim_param") else None)
                     for dd in t.shape.dim]
        et = TensorProto.DataType.Name(t.elem_type) if t is not None else "UNDEFINED"
        return {"name": v.name, "elem_type": et, "shape": shape}

    def attr(a):
        kind = onnx.AttributeProto.AttributeType.Name(a.type).lower()
        value = None
        if a.type == onnx.AttributeProto.INT:
            value = a.i
        elif a.type == onnx.AttributeProto.FLOAT:
            value = a.f
        elif a.type == onnx.AttributeProto.INTS:
            value = list(a.ints)
        return {"name": a.name, "kind": kind, "value": value}

    out = {
        "name": g.name,
        "ir_version": m.ir_version,
        "producer_name": m.producer_name,
        "producer_version": m.producer_version,
        "opset_import": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "inputs": [vi(v) for v in g.input],
        "outputs": [vi(v) for v in g.output],
        "initializers": [t.name for t in g.initializer],
        "nodes": [{"name": n.name, "op_type": n.op_type, "domain": n.domain, "inputs": list(n.input),
                   "outputs": list(n.output), "attributes": [attr(a) for a in n.attribute]} for n in g.node],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "ref":
        ref(sys.argv[2])
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}; see the module docstring")
