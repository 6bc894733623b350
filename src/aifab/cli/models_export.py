"""``aifab models export``: a registered classifier as ONNX, int8 ONNX or a Triton repository."""

from __future__ import annotations

from pathlib import Path

import typer

from aifab.cli.output import JSON_HELP, emit

_FORMAT_HELP = "onnx (float32), onnx-int8 (quantized, for edge devices) or triton (a model repo)."
_PREPROCESS_HELP = (
    "auto: the feature transform in the ONNX graph where ONNX ops express it; graph: there or "
    "fail; python: a Triton ensemble whose Python step runs aifab's transform."
)


def _export(
    ref: str = typer.Argument(..., help="NAME@VERSION or NAME@ALIAS.", show_default=False),
    fmt: str = typer.Option("onnx", "--format", "-f", help=_FORMAT_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="Output directory (default: <workspace>/exports/NAME/vVER/FORMAT)."
    ),
    no_attach: bool = typer.Option(
        False, "--no-attach", help="Do not attach the files to the model version in the registry."
    ),
    batch_size: int = typer.Option(
        64, "--batch-size", help="Rows of the larger batch timed (batch 1 is timed too)."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="Threads for torch and onnxruntime (default: torch's)."
    ),
    target: str = typer.Option(
        "cpu", "--target", help="cpu or gpu: the Triton instance kind (KIND_CPU / KIND_GPU)."
    ),
    preprocess: str = typer.Option("auto", "--preprocess", help=_PREPROCESS_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Export a classifier taking raw records; compare it with aifab's serving path."""
    from aifab.inference.export import export_model

    report = export_model(
        ref,
        fmt,
        out_dir=out,
        attach=not no_attach,
        batch_size=batch_size,
        threads=threads,
        target=target,
        preprocess=preprocess,
    )
    if as_json:
        emit(report, True)
        return
    lat, acc = report["latency_ms"], report["accuracy"]
    timed = report["latency"][str(report["latency_batch"])]
    rows = {
        "path": report["path"],
        "files": ", ".join(report["files"]),
        "size": f"{report['size_bytes']:,} B ({report['size_ratio']:.2f}x torch's "
        f"{report['torch_size_bytes']:,} B)",
        "inputs": f"{report['inputs']} (preprocessing: {report['preprocess']})",
        "latency": f"{lat['exported']:.3f} ms vs aifab's handler {lat['handler']:.3f} ms "
        f"({report['speedup']}x; {report['latency_path']}, batch {report['latency_batch']}, "
        f"{timed.get('threads', report['threads'])} threads)",
        "max_abs_diff": f"{report['max_abs_diff']:.3g} ({report['compared']}, "
        f"tolerance {report['tolerance']:g})",
        "accuracy": "; ".join(report["notes"]) or "no test split"
        if acc is None
        else f"{acc['exported']:.4f} vs aifab's handler {acc['handler']:.4f} "
        f"(delta {acc['delta'] * 100:+.2f} points, {report['test_rows']} test rows)",
        "attached": report.get("artifact_uri") or "no",
    }
    if acc is not None and report["notes"]:
        rows["notes"] = "; ".join(report["notes"])
    emit(rows, False, title=f"{report['model']} -> {report['format']}")


def register_export(models_app: typer.Typer) -> None:
    """Add the ``export`` command to the ``aifab models`` group."""
    models_app.command("export")(_export)
