"""make_onnx_corpus.py DIR — seed files for the ONNX fuzz target: small
models of the operators the importer knows (written with the onnx package)
and a few cut short, so the fuzzer starts from valid structure."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = m.SerializeToString()
    with open(os.path.join(out, "seed-%s.onnx" % name), "wb") as f:
        f.write(data)
    with open(os.path.join(out, "seed-%s-cut.onnx" % name), "wb") as f:
        f.write(data[: len(data) * 2 // 3])


F = TensorProto.FLOAT
x4 = helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])
w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
save("conv", [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
     [x4], [helper.make_tensor_value_info("y", F, None)], [w])
x2 = helper.make_tensor_value_info("x", F, [2, 6])
b = numpy_helper.from_array(np.ones((6, 5), np.float32), "b")
shape = numpy_helper.from_array(np.array([5, 2], np.int64), "shape")
save("gemm", [helper.make_node("Gemm", ["x", "b"], ["g"]),
              helper.make_node("Reshape", ["g", "shape"], ["r"]),
              helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
     [x2], [helper.make_tensor_value_info("y", F, None)], [b, shape])
save("shape", [helper.make_node("Shape", ["x"], ["s"]),
               helper.make_node("Cast", ["s"], ["f"], to=F),
               helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0),
               helper.make_node("Mul", ["r", "r"], ["y"])],
     [x2], [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("f", F, None)])
print("corpus:", len(os.listdir(out)), "files in", out)
