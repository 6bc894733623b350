"""One ONNX file for a classifier: preprocessing nodes + the network + a probabilities head.

The head answers what ``/v1/predict`` answers: ``probabilities`` (softmax in double, as the
handler computes it) and ``label`` (the class name), beside the raw ``logits``. Class names,
feature names, the raw inputs and their rules travel in the model's ``metadata_props``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from aifab.inference.onnx_features import ML_OPSET, OPSET, Preprocess

__all__ = ["OUTPUTS", "bundle", "read_metadata"]

#: The bundled model's outputs, in order.
OUTPUTS = ("probabilities", "label", "logits")
_NET = "net/"


def _prefix_network(graph: Any, pre: Preprocess) -> None:
    """Prefix the network's tensor names; its single input becomes ``pre.output``."""
    if len(graph.input) != 1:
        raise ValueError("preprocessing feeds a network of one input")
    feature_input = graph.input[0].name

    def new(name: str) -> str:
        if not name:
            return name  # an omitted optional input
        return pre.output if name == feature_input else _NET + name

    for node in graph.node:
        node.input[:] = [new(n) for n in node.input]
        node.output[:] = [new(n) for n in node.output]
        node.name = _NET + node.name if node.name else node.name
    for init in graph.initializer:
        init.name = new(init.name)
    for info in [*graph.value_info, *graph.output]:
        info.name = new(info.name)
    del graph.input[:]


def _head(graph: Any, logits: str, classes: Sequence[str]) -> None:
    """Append ``probabilities``, ``label`` and ``logits`` outputs after ``logits``."""
    from onnx import TensorProto, helper, numpy_helper

    names = numpy_helper.from_array(np.asarray(list(classes), dtype=object), "head/classes")
    graph.initializer.append(names)
    graph.node.extend(
        [
            helper.make_node("Cast", [logits], ["head/logits64"], to=TensorProto.DOUBLE),
            helper.make_node("Softmax", ["head/logits64"], ["head/p64"], axis=-1),
            helper.make_node("Cast", ["head/p64"], ["probabilities"], to=TensorProto.FLOAT),
            helper.make_node("ArgMax", [logits], ["head/best"], axis=1, keepdims=0),
            helper.make_node("Gather", ["head/classes", "head/best"], ["label"], axis=0),
        ]
    )
    if logits != "logits":
        graph.node.append(helper.make_node("Identity", [logits], ["logits"]))
    k = len(classes)
    del graph.output[:]
    graph.output.extend(
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", k]),
            helper.make_tensor_value_info("label", TensorProto.STRING, ["batch"]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", k]),
        ]
    )


def _opsets(model: Any, *, preprocessing: bool) -> None:
    from onnx import helper

    have = {o.domain: o for o in model.opset_import}
    need = {"": OPSET, "ai.onnx.ml": ML_OPSET, "com.microsoft": 1} if preprocessing else {"": 13}
    for domain, version in need.items():
        if domain in have:
            # The network's ops (Gemm, Relu, MatMulInteger...) mean the same at opset 20.
            have[domain].version = max(int(have[domain].version), version)
        else:
            model.opset_import.append(helper.make_opsetid(domain, version))
    model.ir_version = max(int(model.ir_version), 9)


def bundle(
    network: Path,
    dst: Path,
    *,
    pre: Preprocess | None,
    classes: Sequence[str],
    metadata: Mapping[str, Any],
) -> Path:
    """Write ``dst``: ``network`` (an exported classifier) with ``pre`` in front and the head.

    Args:
        network: ONNX file of the network (one ``x`` input when ``pre`` is given).
        dst: Where the bundled model goes (written beside and renamed: whole when it exists).
        pre: The preprocessing nodes, or None to keep the network's own inputs.
        classes: Class names in logit order.
        metadata: Extra ``metadata_props`` (values that are not strings are stored as JSON;
            None leaves the key out).

    Returns:
        ``dst``.
    """
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(network))
    graph = model.graph
    if pre is not None:
        _prefix_network(graph, pre)
        types = {"string": TensorProto.STRING, "number": TensorProto.FLOAT}
        graph.input.extend(
            helper.make_tensor_value_info(f.name, types[f.type], ["batch"]) for f in pre.fields
        )
        nodes = [*pre.nodes, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(pre.initializers)
    logits = graph.output[0].name
    _head(graph, logits, classes)
    _opsets(model, preprocessing=pre is not None)
    props = {
        "aifab.classes": list(classes),
        "aifab.outputs": list(OUTPUTS),
        "aifab.inputs": [asdict(f) for f in pre.fields] if pre else None,
        "aifab.features": pre.features if pre else None,
        **metadata,
    }
    del model.metadata_props[:]
    for key, value in props.items():
        if value is not None:
            text = value if isinstance(value, str) else json.dumps(value)
            model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=text))
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, dst)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dst


def read_metadata(path: Path) -> dict[str, Any]:
    """An ONNX file's ``metadata_props`` (JSON values decoded)."""
    import onnx

    out: dict[str, Any] = {}
    for entry in onnx.load(str(path), load_external_data=False).metadata_props:
        try:
            out[entry.key] = json.loads(entry.value)
        except ValueError:
            out[entry.key] = entry.value
    return out
