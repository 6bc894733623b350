"""Zoo classifiers -> ONNX files (dynamic batch axis) and dynamically quantized int8 copies.

Export uses the torch.export-based exporter (``dynamo=True``, the maintained one); a module it
cannot trace falls back to the TorchScript exporter, which takes the same zoo models.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from aifab.core.errors import InvalidInputError, first_line

if TYPE_CHECKING:
    import torch

__all__ = ["CLASSIFIERS", "quantize_int8", "sample_inputs", "to_onnx", "torch_logits"]

#: The zoo builders whose models export (one tensor or token ids + mask in, logits out).
CLASSIFIERS = ("mlp", "cnn", "transformer-classifier", "fusion-classifier")
OPSET = 18
_log = logging.getLogger(__name__)


def torch_logits(module: torch.nn.Module, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Logits of a zoo classifier for encoded inputs, the way training calls it.

    mlp and cnn take one positional tensor ``x``; the transformer classifier takes
    ``input_ids`` and ``attention_mask`` keywords.
    """
    import torch

    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in inputs.items()}
    with torch.inference_mode():
        out = module(tensors["x"]) if "x" in tensors else module(**tensors)
    return np.asarray(out.float().numpy(), dtype=np.float32)


def sample_inputs(sidecar: Mapping[str, Any], batch: int = 2, seed: int = 0) -> dict[str, Any]:
    """Random model inputs of the right names, shapes and dtypes for a classifier's sidecar.

    Raises:
        InvalidInputError: the builder is not an exportable classifier.
    """
    builder, cfg = str(sidecar.get("builder")), dict(sidecar.get("config") or {})
    rng = np.random.default_rng(seed)
    if builder == "mlp":
        return {"x": rng.standard_normal((batch, int(cfg["in_features"]))).astype(np.float32)}
    if builder == "cnn":
        size = int(cfg["image_size"])
        shape = (batch, int(cfg["in_channels"]), size, size)
        return {"x": rng.random(shape, dtype=np.float32)}
    if builder == "transformer-classifier":
        pre = (sidecar.get("meta") or {}).get("preprocess") or {}
        seq = int(pre.get("max_length") or cfg["max_len"])
        ids = rng.integers(1, int(cfg["vocab_size"]), (batch, seq), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones((batch, seq), dtype=np.int64)}
    if builder == "fusion-classifier":
        return _fusion_sample(sidecar, cfg, batch, rng)
    raise InvalidInputError(
        f"a {builder} model cannot be exported: export supports classifiers "
        f"({', '.join(CLASSIFIERS)})"
    )


def _fusion_sample(
    sidecar: Mapping[str, Any], cfg: Mapping[str, Any], batch: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Inputs of each branch the fusion model has, in its keyword order."""
    out: dict[str, Any] = {}
    if cfg.get("image"):
        size, channels = int(cfg["image"]["image_size"]), int(cfg["image"]["in_channels"])
        out["image"] = rng.random((batch, channels, size, size), dtype=np.float32)
    if cfg.get("text"):
        text = dict(cfg["text"])
        tc = {**sidecar, "builder": "transformer-classifier", "config": text}
        out.update(sample_inputs(tc, batch=batch))
    if cfg.get("tabular"):
        width = int(cfg["tabular"]["in_features"])
        out["features"] = rng.standard_normal((batch, width)).astype(np.float32)
    return out


def _positional(module: torch.nn.Module, names: list[str]) -> torch.nn.Module:
    """``module`` behind a forward taking the inputs positionally (exporters name them so)."""
    import torch

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            if names == ["x"]:
                out: torch.Tensor = self.inner(args[0])
                return out
            out = self.inner(**dict(zip(names, args, strict=True)))
            return out

    return Positional().eval()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence exporter chatter (missing torchvision ops, deprecations) on stderr."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)


def to_onnx(module: torch.nn.Module, sample: Mapping[str, np.ndarray], path: Path) -> Path:
    """Export ``module`` to ``path`` with inputs named as ``sample``'s keys and output ``logits``.

    Axis 0 of every input and of ``logits`` is dynamic (any batch size); other axes keep the
    sample's sizes. The file is written beside ``path`` and renamed, so it is whole when it exists.

    Args:
        module: A zoo classifier (eval mode, CPU).
        sample: Example inputs, e.g. from the handler's ``encode_inputs`` or :func:`sample_inputs`.
        path: Where the ``.onnx`` file goes (parent directories are created).

    Returns:
        ``path``.

    Raises:
        InvalidInputError: neither exporter could convert the module.
    """
    import torch

    names = list(sample)
    # Two rows at least: torch.export specialises a batch of one to the constant 1.
    arrays = [np.resize(v, (max(2, len(v)), *v.shape[1:])) for v in sample.values()]
    args = tuple(torch.from_numpy(a) for a in arrays)
    wrapped = _positional(module.eval(), names)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with _quiet():
            try:
                _export_dynamo(wrapped, args, names, tmp)
            except Exception as exc:  # noqa: BLE001 - any tracing failure: try the other exporter
                _log.warning("torch.export could not trace the model (%s); using TorchScript", exc)
                try:
                    _export_torchscript(wrapped, args, names, tmp)
                except Exception as exc2:  # noqa: BLE001 - report it as the model's problem
                    first = first_line(exc2)
                    raise InvalidInputError(f"cannot export the model to ONNX: {first}") from None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _export_dynamo(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], names: list[str], path: Path
) -> None:
    import torch

    batch = torch.export.Dim("batch")
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names,
        output_names=["logits"],
        # The wrapper takes *args, so the spec is one tuple holding one entry per input.
        dynamic_shapes=(tuple({0: batch} for _ in names),),
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
        optimize=True,
        verbose=False,
    )


def _export_torchscript(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], names: list[str], path: Path
) -> None:
    import torch

    axes = {n: {0: "batch"} for n in [*names, "logits"]}
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names,
        output_names=["logits"],
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )


def quantize_int8(
    src: Path, dst: Path, *, calibration: Mapping[str, np.ndarray] | None = None
) -> Path:
    """Write an int8 copy of ONNX model ``src`` to ``dst`` (dynamic quantization).

    Weights of MatMul/Gemm/Conv/Gather become int8; activations are quantized per batch at run
    time. Two guards keep accuracy: the output layer stays float (it sets the class margins
    and is small), and, given ``calibration`` inputs, raw features that feed a Gemm are
    standardized inside the graph with the layer's weights rescaled to match (the same function
    in float; without it one large feature, a year next to 0/1 flags, sets the int8 scale of the
    whole input and the flags round to zero).

    Args:
        src: The float ONNX model.
        dst: Where the int8 model goes.
        calibration: Example inputs by name (e.g. encoded test rows) for the feature statistics.

    Returns:
        ``dst``.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quant-", dir=dst.parent) as scratch:
        pre = Path(scratch) / "pre.onnx"
        try:
            with _quiet():
                quant_pre_process(str(src), str(pre))
        except Exception as exc:  # noqa: BLE001 - the step is an optimisation, not required
            _log.warning("quantization pre-processing failed (%s); quantizing as is", exc)
            shutil.copyfile(src, pre)
        model = onnx.load(str(pre))
        if calibration:
            _fold_standardization(model, calibration)
        outputs = {o.name for o in model.graph.output}
        keep_float = [
            name
            for n in model.graph.node
            if n.op_type in ("Gemm", "MatMul") and set(n.output) & outputs
            # quantize_dynamic rewrites Gemm as MatMul + Add under the name <node>_MatMul.
            for name in (n.name, f"{n.name}_MatMul")
        ]
        folded = Path(scratch) / "folded.onnx"
        onnx.save(model, str(folded))
        out = Path(scratch) / "int8.onnx"
        with _quiet(), _root_logging_guard():
            quantize_dynamic(
                str(folded), str(out), weight_type=QuantType.QInt8, nodes_to_exclude=keep_float
            )
        os.replace(out, dst)
    return dst


def _fold_standardization(model: Any, calibration: Mapping[str, np.ndarray]) -> None:
    """Standardize each float 2-D input feeding one plain Gemm; rescale that Gemm to match.

    ``W x + b`` becomes ``(W diag(sd)) ((x - mu) / sd) + (b + W mu)``: equal in exact
    arithmetic, but the new input and weights have comparable scales per feature.
    """
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    uses: dict[str, int] = {}
    for n in graph.node:
        for name in n.input:
            uses[name] = uses.get(name, 0) + 1
    prologue = []
    for inp in graph.input:
        x = calibration.get(inp.name)
        if x is None or x.dtype.kind != "f" or x.ndim != 2 or uses.get(inp.name) != 1:
            continue
        node = next(n for n in graph.node if inp.name in n.input)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        if (
            node.op_type != "Gemm"
            or not plain
            or attrs.get("transA", 0)
            or len(node.input) < 3
            or list(node.input[:1]) != [inp.name]
            or any(n not in inits or uses.get(n) != 1 for n in node.input[1:3])
        ):
            continue
        w = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
        b = numpy_helper.to_array(inits[node.input[2]]).astype(np.float64)
        mu = x.astype(np.float64).mean(axis=0)
        sd = x.astype(np.float64).std(axis=0)
        sd[sd == 0] = 1.0
        trans_b = bool(attrs.get("transB", 0))
        w_new = w * sd[None, :] if trans_b else w * sd[:, None]
        b_new = b + (w @ mu if trans_b else mu @ w).reshape(b.shape)
        for name, value in ((node.input[1], w_new), (node.input[2], b_new)):
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
        mu_name, sd_name, out = f"{inp.name}_mean", f"{inp.name}_std", f"{inp.name}_standard"
        graph.initializer.extend(
            [
                numpy_helper.from_array(mu.astype(np.float32), mu_name),
                numpy_helper.from_array(sd.astype(np.float32), sd_name),
            ]
        )
        prologue += [
            helper.make_node("Sub", [inp.name, mu_name], [f"{inp.name}_centered"]),
            helper.make_node("Div", [f"{inp.name}_centered", sd_name], [out]),
        ]
        node.input[0] = out
    if prologue:
        nodes = [*prologue, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)


@contextlib.contextmanager
def _root_logging_guard() -> Iterator[None]:
    """Keep onnxruntime's module-level ``logging.warning`` from configuring the root logger."""
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None
    if guard is not None:
        root.addHandler(guard)
    try:
        yield
    finally:
        if guard is not None:
            root.removeHandler(guard)
