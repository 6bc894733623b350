"""Multimodal end to end: the fusion zoo model, the classify recipe over image bytes + text +
a field (resume included), serving one record (no train/serve skew, image caps) and the
per-modality explanation. One workspace per module (MLflow's schema takes seconds)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests.unit.multimodal.conftest import FAST

from aifab.core.errors import InvalidInputError


@pytest.fixture(scope="module", autouse=True)
def torch_threads() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


CFG = {
    "dataset": "parcels@1",
    "label": "route",
    "modality": "multimodal",
    "image_column": "image",
    "image_shape": [3, 16, 16],
    "text_column": "note",
    "features": ["weight_kg"],
    "vocab_size": 300,
    "max_length": 12,
    "model": {"config": {"image": {"channels": [4]}, "text": {"d_model": 16, "heads": 2}}},
}


@pytest.fixture(scope="module")
def fused(parcels: list[dict[str, Any]]) -> dict[str, Any]:
    from aifab.train.recipes.classify import main

    return main({**CFG, "epochs": 1, "batch_size": 16, "register": "parcels-fused", **FAST})


def test_fusion_model_takes_any_mix_of_inputs() -> None:
    import torch

    from aifab.models.zoo import build_model

    image = torch.rand(2, 3, 16, 16)
    ids = torch.randint(1, 50, (2, 8))
    m = build_model("fusion-classifier", {"num_classes": 3, "image": {"image_size": 16}})
    assert m(image=image).shape == (2, 3)
    m = build_model(
        "fusion-classifier",
        {"num_classes": 3, "text": {"vocab_size": 50}, "tabular": {"in_features": 2}},
    )
    assert m(input_ids=ids, features=torch.randn(2, 2)).shape == (2, 3)
    with pytest.raises(ValueError, match="'features'"):
        m(input_ids=ids)
    with pytest.raises(InvalidInputError, match="at least one of image, text, tabular"):
        build_model("fusion-classifier", {"num_classes": 3})


def test_dual_encoder_scores_every_image_against_every_text() -> None:
    import torch

    from aifab.models.fusion import contrastive_loss
    from aifab.models.zoo import build_model

    m = build_model("dual-encoder", {"image": {"image_size": 16}, "text": {"vocab_size": 50}})
    logits = m(torch.rand(5, 3, 16, 16), torch.randint(1, 50, (5, 8)))
    assert logits.shape == (5, 5)
    assert torch.allclose(m.encode_image(torch.rand(2, 3, 16, 16)).norm(dim=1), torch.ones(2))
    assert float(contrastive_loss(logits).detach()) > 0


def test_recipe_trains_saves_and_registers_a_fusion_model(fused: dict[str, Any]) -> None:
    from aifab.models.checkpoint import load_model

    assert fused["model"] == "fusion-classifier" and fused["model_version"] == 1
    _, sidecar = load_model(fused["model_dir"])
    pre = sidecar["meta"]["preprocess"]
    assert pre["modality"] == "multimodal"
    assert (pre["image_column"], pre["text_column"], pre["features"]) == (
        "image",
        "note",
        ["weight_kg"],
    )
    # The user's branch keys merge into the sizes the data decided.
    assert sidecar["config"]["image"] == {"in_channels": 3, "image_size": 16, "channels": [4]}
    assert sidecar["config"]["text"]["d_model"] == 16
    assert sidecar["config"]["tabular"]["in_features"] == 1


def test_multimodal_config_errors_name_the_key(parcels: list[dict[str, Any]]) -> None:
    from aifab.train.classification import check_inputs
    from aifab.train.recipes.classify import Config

    bare = {"dataset": "parcels@1", "label": "route", "modality": "multimodal"}
    with pytest.raises(InvalidInputError, match="needs at least one of image_column"):
        check_inputs(Config(**bare))
    with pytest.raises(InvalidInputError, match="column 'photo' not found"):
        check_inputs(Config(**bare, image_column="photo"))


def test_resume_continues_from_the_checkpoint(parcels: list[dict[str, Any]], tmp_path: Path):
    from aifab.train.recipes.classify import main

    cfg = {**CFG, "batch_size": 16, "checkpoint_dir": str(tmp_path), "checkpoint_every": 1}
    first = main({**cfg, "epochs": 1, **FAST})
    again = main({**cfg, "epochs": 2, **FAST})
    assert first["resumed_from"] is None and again["resumed_from"] == first["steps"]
    assert again["steps"] == 2 * first["steps"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _records(parcels: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [
        {"image": _b64(p["image"]), "note": p["note"], "weight_kg": p["weight_kg"]}
        for p in parcels[:n]
    ]


def _handler(model_dir: str, **options: Any) -> Any:
    from aifab.inference.classifier import ClassifierHandler
    from aifab.models.checkpoint import read_sidecar

    h = ClassifierHandler()
    h.setup(Path(model_dir), read_sidecar(model_dir), options)
    return h


def test_one_record_serves_exactly_the_training_logits(
    fused: dict[str, Any], parcels: list[dict[str, Any]]
) -> None:
    import torch

    from aifab.models.checkpoint import load_model
    from aifab.train.classification import load_data
    from aifab.train.recipes.classify import Config

    h = _handler(fused["model_dir"])
    assert h.describe()["modalities"] == ["image", "text", "tabular"]
    assert [c["type"] for c in h.describe()["input_columns"]] == ["image", "text", "number"]
    records = _records(parcels, 5)
    data = load_data(Config(**CFG))
    model, _ = load_model(fused["model_dir"])
    rows = np.arange(5)
    with torch.no_grad():
        want = data.forward(model, rows, torch.device("cpu")).numpy()
    inputs = h.encode_inputs(h.decode({"records": records}))
    assert sorted(inputs) == sorted(data.inputs)
    for key, value in inputs.items():
        assert np.array_equal(value, data.inputs[key][rows]), key
    assert np.array_equal(h.forward(inputs), want)
    # One record alone, as /v1/predict gets it, predicts what it does inside a batch.
    alone = h.predict(h.decode({"records": records[2:3]}))[0]
    assert alone["label"] == h.classes[int(want[2].argmax())]


def test_images_are_capped_before_decoding(
    fused: dict[str, Any], parcels: list[dict[str, Any]]
) -> None:
    from PIL import Image

    records = _records(parcels, 3)
    h = _handler(fused["model_dir"], max_images=2, max_image_bytes=4096, max_image_pixels=64 * 64)
    with pytest.raises(InvalidInputError, match=r"3 rows are over the limit of 2 \(max_images\)"):
        h.decode({"records": records})
    big = {**records[0], "image": "A" * 8000}
    with pytest.raises(InvalidInputError, match=r"row 0, field 'image'.*over max_image_bytes"):
        h.decode({"records": [big]})
    import io

    buf = io.BytesIO()
    Image.new("RGB", (100, 100)).save(buf, format="PNG")
    wide = {**records[0], "image": _b64(buf.getvalue())}
    with pytest.raises(InvalidInputError, match=r"100x100 pixels is over max_image_pixels"):
        h.decode({"records": [wide]})
    with pytest.raises(InvalidInputError, match="row 0, field 'image': not a readable image"):
        h.decode({"records": [{**records[0], "image": _b64(b"not a png")}]})


def test_explanations_split_a_prediction_by_modality(
    fused: dict[str, Any], parcels: list[dict[str, Any]]
) -> None:
    from aifab.ops.explain.explainers import explain_records

    out = explain_records("parcels-fused@1", _records(parcels, 2))
    assert out["method"] == "modality"
    for e in out["explanations"]:
        mods = {c["modality"]: c["contribution"] for c in e["contributions"]}
        assert set(mods) == {"image", "text", "tabular"}
        # Shapley efficiency: the shares add up to the prediction minus the empty baseline.
        assert sum(mods.values()) == pytest.approx(e["value"] - e["base"], abs=1e-6)


def test_contrastive_recipe_trains_a_dual_encoder_and_resumes(clip: dict[str, Any]) -> None:
    from aifab.models.checkpoint import load_model

    assert clip["first"]["resumed_from"] is None and clip["resumed_from"] == 1
    assert clip["model_version"] == 1
    m = clip["metrics"]
    assert 0.0 <= m["test_recall_at_1"] <= m["test_recall_at_10"] <= 1
    _, sidecar = load_model(clip["model_dir"])
    assert sidecar["builder"] == "dual-encoder" and sidecar["config"]["embed_dim"] == 16
    assert sidecar["meta"]["preprocess"]["text_column"] == "caption"
    assert (Path(clip["model_dir"]) / "tokenizer.json").is_file()


def test_served_over_http_predict_explain_and_embed(
    fused: dict[str, Any],
    clip: dict[str, Any],
    parcels: list[dict[str, Any]],
    live_server: Any,
) -> None:
    import time

    import httpx

    from aifab.inference.deployments import create_deployment
    from aifab.serve.keys import create_key

    create_deployment("parcels-fused@1", name="parcels", max_batch_size=8, max_wait_ms=5)
    create_deployment("parcels-clip@1", name="clip")
    _, secret = create_key("client", name="mm", rate=None)
    server = live_server(reconcile_interval_s=0.2)
    headers = {"Authorization": f"Bearer {secret}"}
    record = _records(parcels, 1)[0]
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        deadline = time.monotonic() + 120
        while True:
            r = http.post("/v1/predict/parcels", json={"records": [record]})
            if r.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert r.json()["predictions"][0]["label"] in {"A1", "B2", "C3", "freight"} | {
            f"{a}{d}" for a in "ABC" for d in "123"
        }
        bad = http.post(
            "/v1/predict/parcels", json={"records": [{**record, "image": "A" * 2_000_000}]}
        )
        assert bad.status_code == 422 and "max_image_bytes" in bad.json()["error"]["message"]
        r = http.post("/v1/explain/parcels", json={"records": [record]})
        assert r.status_code == 200, r.text
        shares = r.json()["explanations"][0]["contributions"]
        assert {c["modality"] for c in shares} == {"image", "text", "tabular"}
        image_url = "data:image/png;base64," + record["image"]
        deadline = time.monotonic() + 120
        while True:
            r = http.post(
                "/v1/embeddings", json={"model": "clip", "input": ["a red circle", image_url]}
            )
            if r.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        vectors = [d["embedding"] for d in r.json()["data"]]
        assert [len(v) for v in vectors] == [16, 16]
        assert np.linalg.norm(vectors[1]) == pytest.approx(1.0, abs=1e-4)


def _ico_bomb(side: int = 4000) -> bytes:
    """An ICO whose directory says 16x16 but which holds a ``side`` x ``side`` PNG.

    One colour, so the PNG is ~16 KB while decoding it takes ``side`` squared bytes.
    """
    import io
    import struct

    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (side, side), 0).save(buf, format="PNG")
    png = buf.getvalue()
    entry = struct.pack("<BBBBHHII", 16, 16, 0, 0, 1, 32, len(png), 6 + 16)
    return struct.pack("<HHH", 0, 1, 1) + entry + png


def test_an_ico_wrapping_a_huge_png_is_refused_before_decoding_over_http(
    fused: dict[str, Any], clip: dict[str, Any], parcels: list[dict[str, Any]], live_server: Any
) -> None:
    """Issue 31: the ICO's own header passed the pixel cap and its inner PNG was decoded."""
    from aifab.inference.deployments import create_deployment
    from aifab.serve.keys import create_key

    create_deployment("parcels-fused@1", name="parcels-ico", max_batch_size=8, max_wait_ms=5)
    create_deployment("parcels-clip@1", name="clip-ico")
    _, secret = create_key("client", name="ico", rate=None)
    server = live_server(reconcile_interval_s=0.2)
    bomb = _b64(_ico_bomb())
    record = {**_records(parcels, 1)[0], "image": bomb}
    auth = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=60) as http:
        for route in ("/v1/predict/parcels-ico", "/v1/explain/parcels-ico"):
            r = _ready_post(http, route, {"records": [record]})
            assert r.status_code == 422, (route, r.text)
            assert "image format ICO is not allowed" in r.json()["error"]["message"], route
        url = "data:image/png;base64," + bomb
        r = _ready_post(http, "/v1/embeddings", {"model": "clip-ico", "input": [url]})
        assert r.status_code == 400, r.text  # the OpenAI routes' status for bad input
        assert "image format ICO is not allowed" in r.json()["error"]["message"]


def test_image_work_is_priced_by_pixels_and_capped_per_request_over_http(
    fused: dict[str, Any], clip: dict[str, Any], parcels: list[dict[str, Any]], live_server: Any
) -> None:
    """Issue 31, item 2: an image cost 1 token whatever its size, and /v1/embeddings took any
    number of images; a 1024x1024 image is now 4 tiles of 512x512 (85 + 4 x 170 tokens)."""
    import io

    from PIL import Image

    from aifab.inference.deployments import create_deployment
    from aifab.serve.keys import create_key

    create_deployment("parcels-fused@1", name="parcels-priced", max_batch_size=8, max_wait_ms=5)
    create_deployment("parcels-clip@1", name="clip-priced")
    _, secret = create_key("client", name="priced", rate=None, token_quota=700)
    server = live_server(reconcile_interval_s=0.2)
    buf = io.BytesIO()
    Image.new("RGB", (1024, 1024), (90, 90, 90)).save(buf, format="PNG")
    record = {**_records(parcels, 1)[0], "image": _b64(buf.getvalue())}
    auth = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=60) as http:
        r = _ready_post(http, "/v1/predict/parcels-priced", {"records": [record]})
        assert r.status_code == 429, r.text
        assert "765" in r.json()["error"]["message"]  # the tokens asked for, named
        small = _records(parcels, 1)[0]  # 32x32: one tile, 255 tokens
        r = http.post("/v1/predict/parcels-priced", json={"records": [small]})
        assert r.status_code == 200, r.text
        url = "data:image/png;base64," + small["image"]
        r = _ready_post(http, "/v1/embeddings", {"model": "clip-priced", "input": [url] * 17})
        assert r.status_code == 400, r.text
        assert "at most 16 images" in r.json()["error"]["message"]


def _ready_post(http: Any, route: str, body: dict[str, Any]) -> Any:
    """POST ``body``, again while the deployment is still loading (503), up to two minutes."""
    import time

    deadline = time.monotonic() + 120
    while True:
        r = http.post(route, json=body)
        if r.status_code != 503 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def _darker_photo(data: bytes, seed: int) -> str:
    """The image darker, at 192x192 with sensor noise: a client's photo, ~100 KB in base64."""
    import io

    from PIL import Image, ImageEnhance

    with Image.open(io.BytesIO(data)) as im:
        dark = ImageEnhance.Brightness(im.convert("RGB")).enhance(0.4).resize((192, 192))
    noise = np.random.default_rng(seed).integers(-8, 9, (192, 192, 3))
    pixels = np.clip(np.asarray(dark, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return _b64(buf.getvalue())


def test_monitor_watches_the_images_clients_send(
    fused: dict[str, Any], parcels: list[dict[str, Any]], live_server: Any
) -> None:
    """Served image records reach the request log and a monitor's drift report sees them."""
    import time

    import httpx

    from aifab.inference.deployments import create_deployment
    from aifab.inference.request_log import MAX_FIELD_BYTES
    from aifab.ops.monitors import create_monitor, run_monitor
    from aifab.serve.keys import create_key

    create_deployment("parcels-fused@1", name="parcels-watch", max_batch_size=64)
    _, secret = create_key("client", name="mm-watch", rate=None)
    server = live_server(reconcile_interval_s=0.2)
    photos = [
        {"image": _darker_photo(p["image"], i), "note": p["note"], "weight_kg": p["weight_kg"]}
        for i, p in enumerate(parcels[:40])
    ]
    # Each image alone is larger than a request-log field may be: they must still be watched.
    assert min(len(p["image"]) for p in photos) > MAX_FIELD_BYTES
    with httpx.Client(base_url=server.url, timeout=60) as http:
        http.headers["Authorization"] = f"Bearer {secret}"
        deadline = time.monotonic() + 120
        while True:
            r = http.post("/v1/predict/parcels-watch", json={"records": photos[:8]})
            if r.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        for start in range(8, 40, 8):
            r = http.post("/v1/predict/parcels-watch", json={"records": photos[start : start + 8]})
            assert r.status_code == 200, r.text
    create_monitor(
        "parcels-watch",
        {"deployment": "parcels-watch", "min_rows": 20, "features": ["image", "weight_kg"]},
    )
    deadline = time.monotonic() + 30
    while True:  # the log is written off the request path
        result = run_monitor("parcels-watch")
        if result["status"] != "no_data" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert result["values"]["rows"] >= 20, result["report"]
    drift = result["report"]["drift"]
    col = drift["columns"]["image"]
    assert col["kind"] == "image" and col["n_cur"] >= 20 and col["unreadable"] == 0
    assert col["drift"] and "image" in drift["drifted"] and "weight_kg" not in drift["drifted"]
    # Darker, not just larger: the statistics of the thumbnails saw it.
    assert any(col["tests"][f"brightness.{t}"]["drift"] for t in _tests_of(col, "brightness"))
    # Width from the photo's recorded size (192), not the thumbnail's: the reference's is 32.
    assert any(col["tests"][f"width.{t}"]["drift"] for t in _tests_of(col, "width"))


def test_recall_counts_the_own_match_rank() -> None:
    import torch

    from aifab.train.recipes.contrastive import ranks_to_recall

    scores = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.5, 0.1], [0.3, 0.2, 0.1]])
    # Query 0 ranks its image 1st, query 1 2nd, query 2 3rd.
    assert ranks_to_recall(scores, (1, 2)) == {
        "recall_at_1": pytest.approx(1 / 3),
        "recall_at_2": pytest.approx(2 / 3),
    }


def test_onnx_backend_matches_torch(fused: dict[str, Any], parcels: list[dict[str, Any]]) -> None:
    records = _records(parcels, 4)
    torch_h, onnx_h = _handler(fused["model_dir"]), _handler(fused["model_dir"], backend="onnx")
    inputs = torch_h.encode_inputs(torch_h.decode({"records": records}))
    assert np.allclose(onnx_h.forward(inputs), torch_h.forward(inputs), atol=1e-4)
    # One record alone too: the batch axis is dynamic.
    one = {k: v[:1] for k, v in inputs.items()}
    assert np.allclose(onnx_h.forward(one), torch_h.forward(one), atol=1e-4)


def test_onnx_export_report_holds_the_fusion_model_to_the_attention_tolerance(
    fused: dict[str, Any], tmp_path: Path
) -> None:
    from aifab.inference.export import ATTENTION_TOLERANCE, export_model

    report = export_model("parcels-fused@1", "onnx", out_dir=tmp_path / "x", repeats=1)
    assert report["tolerance"] == ATTENTION_TOLERANCE
    assert report["within_tolerance"], report["max_abs_diff"]
    assert report["accuracy"]["delta"] == 0


def test_model_card_shows_each_modality_source(fused: dict[str, Any], tmp_path: Path) -> None:
    from aifab.ops.card.build import build_card

    out = build_card("parcels-fused@1", explain=False, attach=False, out_dir=tmp_path)
    inputs = {i["modality"]: i for i in out["card"]["inputs"]}
    assert inputs["image"]["columns"] == ["image"] and inputs["text"]["columns"] == ["note"]
    assert inputs["tabular"]["columns"] == ["weight_kg"]
    assert {i["dataset"] for i in inputs.values()} == {"parcels@1"}
    markdown = (tmp_path / "card.md").read_text()
    assert "### Inputs by modality" in markdown and "decoded, resized to 3x16x16" in markdown


def test_test_split_of_lake_image_bytes_serves_as_base64(fused: dict[str, Any]) -> None:
    # Regression: the test split read an image column as file paths only, so exports and
    # evaluations of a model over image bytes in the lake failed ("File name too long").
    from aifab.inference.evaluation import test_split
    from aifab.models.checkpoint import read_sidecar

    records, labels = test_split(fused["model_dir"], read_sidecar(fused["model_dir"]))
    assert records and len(records) == len(labels)
    h = _handler(fused["model_dir"])
    assert len(
        h.predict(h.decode({"records": [{c: r[c] for c in h.input_columns} for r in records]}))
    ) == len(records)


def test_drift_report_watches_image_inputs(parcels: list[dict[str, Any]]) -> None:
    import io

    import pyarrow as pa
    from PIL import Image, ImageEnhance

    from aifab.ops.drift import drift_report

    def darker(data: bytes) -> str:
        with Image.open(io.BytesIO(data)) as im:
            buf = io.BytesIO()
            ImageEnhance.Brightness(im.convert("RGB")).enhance(0.4).save(buf, format="PNG")
        return _b64(buf.getvalue())

    images = [p["image"] for p in parcels]
    reference = {"image": pa.array(images[:30], pa.binary())}  # bytes, as the lake has them
    same = drift_report(reference, {"image": [_b64(b) for b in images[30:]]})  # base64, as logged
    col = same["columns"]["image"]
    assert col["kind"] == "image" and col["n_cur"] == 30
    assert "pixels.mean_distance" in col["tests"] and _tests_of(col, "brightness")
    assert not any(col["tests"][f"brightness.{t}"]["drift"] for t in _tests_of(col, "brightness"))
    shifted = drift_report(reference, {"image": [darker(b) for b in images[30:]] + [None, "x"]})
    col = shifted["columns"]["image"]
    assert col["drift"] and shifted["drifted"] == ["image"]
    assert any(col["tests"][f"brightness.{t}"]["drift"] for t in _tests_of(col, "brightness"))
    assert col["unreadable"] == pytest.approx(1 / 32) and col["missing"] == pytest.approx(1 / 32)


def _tests_of(col: dict[str, Any], stat: str) -> list[str]:
    return [k.split(".", 1)[1] for k in col["tests"] if k.startswith(stat + ".")]


def test_profile_of_an_image_column_shows_sizes_and_modes(parcels: list[dict[str, Any]]) -> None:
    from aifab.data import resolve
    from aifab.data.catalog import ensure_profile

    col = ensure_profile(resolve("parcels@1"))["columns"]["image"]
    assert col["images"]["width"] == [32, 32] and col["images"]["modes"] == {"RGB": 60}
    assert col["images"]["formats"] == {"PNG": 60} and col["images"]["unreadable"] == 0


def test_export_checks_accuracy_on_every_test_row(fused: dict[str, Any]) -> None:
    # Regression: the accuracy check decodes the whole test split in one call; the default
    # image cap (64 per request) refused it although the caller had lifted max_request_items.
    from aifab.models.checkpoint import read_sidecar

    h = _handler(fused["model_dir"], max_request_items=1 << 30)
    from aifab.inference.evaluation import test_split

    records, _ = test_split(fused["model_dir"], read_sidecar(fused["model_dir"]))
    many = [{c: r[c] for c in h.input_columns} for r in records] * 20
    assert len(h.decode({"records": many})) == len(many) > 64
