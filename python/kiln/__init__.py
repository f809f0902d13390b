"""kiln — a search-based ML compiler and LLM runtime, from Python.

Two halves, both over libkiln's public C API through ctypes (numpy is the
only dependency):

  Graphs: kiln.Graph builds a graph of tensors with Python operators and the
  nn functions (kiln.softmax, kiln.rmsnorm, kiln.attention, ...), with
  symbolic sizes by name; g.compile() returns a callable on numpy arrays,
  g.evaluate() runs the reference interpreter, g.explain() gives
  `kiln explain`'s text.

  Models: kiln.Model("model.gguf") loads and compiles a GGUF language model:
  tokenize, detokenize, generate, stream, logits, tokens_per_second;
  kiln.tune() searches a model's schedules, kiln.tune_records() lists the
  tuning DB's records as dicts.

Every failure raises kiln.Error (subclasses per kind: ShapeError, DtypeError,
RangeError, FormatError, ...) with the C library's message.
"""
from . import _lib
from .errors import (DtypeError, Error, FormatError, InvalidArgumentError, KilnIOError, OutOfMemoryError,
                     RangeError, ShapeError, UnboundError, UnsupportedError)
from .graph import DTYPES, Compiled, Graph, Tensor
from .model import Model, tune, tune_records
from .nn import (abs, attention, clamp, concat, embedding, exp, gelu, layernorm, linear, log, log_softmax, matmul,
                 maximum, minimum, relu, rmsnorm, rope, sigmoid, silu, softmax, softplus, sqrt, tanh, where)

__version__ = "0.1.0"


def version():
    """the version of the loaded libkiln ("MAJOR.MINOR.PATCH")"""
    return _lib.lib().kiln_version().decode()


__all__ = ["Graph", "Tensor", "Compiled", "Model", "tune", "tune_records", "DTYPES", "version", "Error", "InvalidArgumentError",
           "ShapeError", "DtypeError", "UnboundError", "RangeError", "KilnIOError", "FormatError",
           "UnsupportedError", "OutOfMemoryError", "abs", "attention", "clamp", "concat", "embedding", "exp",
           "gelu", "layernorm", "linear", "log", "log_softmax", "matmul", "maximum", "minimum", "relu", "rmsnorm",
           "rope", "sigmoid", "silu", "softmax", "softplus", "sqrt", "tanh", "where"]
