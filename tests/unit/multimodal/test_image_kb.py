"""Image knowledge bases: a folder of images (captions optional) embedded by a tiny dual encoder
trained on the example's parcels, searched by text, by image and by likeness, from the service,
the CLI, the HTTP API and the dashboard. One workspace and one model for the module."""

from __future__ import annotations

import base64
import csv
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.unit.multimodal.conftest import CLIP, make_data

from aifab.core.errors import InvalidInputError

ROWS = 120


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def stickers(module_workspace: Path) -> dict[str, list[Any]]:
    """120 parcels ingested; a dual encoder trained 20 epochs on them: ``parcels-clip@1``.

    Returns the example's columns (the last 24 rows are its valid and test splits).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from aifab.data import ingest
    from aifab.train.recipes.contrastive import main

    threads = torch.get_num_threads()
    cols: dict[str, list[Any]] = make_data().rows(ROWS)
    path = module_workspace.parent / "parcels.parquet"
    pq.write_table(pa.table({**cols, "image": pa.array(cols["image"], pa.binary())}), path)
    ingest("parcels", str(path))
    main({**CLIP, "epochs": 20, "register": "parcels-clip"})
    torch.set_num_threads(threads)
    return cols


HELD_OUT = range(ROWS - 24, ROWS)  # the valid and test rows: never trained on


@pytest.fixture(scope="module")
def folder(stickers: dict[str, list[Any]], module_workspace: Path) -> Path:
    """The held-out stickers as PNG files, half of them captioned, plus two faults."""
    root = module_workspace.parent / "pics"
    root.mkdir()
    with (root / "captions.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["file", "caption"])
        for i in HELD_OUT:
            (root / f"p{i}.png").write_bytes(stickers["image"][i])
            if i % 2:
                out.writerow([f"p{i}.png", stickers["caption"][i]])
        out.writerow(["gone.png", "a caption of nothing"])
    png = stickers["image"][0]
    (root / "broken.png").write_bytes(png[: len(png) // 2])  # truncated mid-file
    return root


@pytest.fixture(scope="module")
def pics(folder: Path) -> dict[str, Any]:
    from aifab.rag import create_kb

    return create_kb("pics", str(folder), config={"embedder": "parcels-clip@1"})


def _rank(results: list[dict[str, Any]], document: str) -> int:
    return [h["document"] for h in results].index(document) + 1


def test_text_finds_the_described_image_well_above_chance(
    pics: dict[str, Any], stickers: dict[str, list[Any]]
) -> None:
    from aifab.rag import search

    assert pics["counts"]["documents"] == 24 and pics["counts"]["embedded"] == 24
    reasons = {q["document"]: q["reason"] for q in pics["quarantine"]}
    assert set(reasons) == {"broken.png", "gone.png"}
    assert "not a readable image" in reasons["broken.png"]
    assert "captions.csv captions 'gone.png'" in reasons["gone.png"]
    ranks = []
    for i in HELD_OUT:  # dense: the image vectors alone (captions are BM25's)
        out = search("pics", stickers["caption"][i], k=24, mode="dense")
        ranks.append(_rank(out["results"], f"p{i}.png"))
    chance = (len(ranks) + 1) / 2
    assert np.mean(ranks) < chance / 2, ranks
    hit = search("pics", stickers["caption"][ROWS - 1], k=1)["results"][0]
    assert hit["image"].startswith("data:image/png;base64,")
    assert hit["metadata"]["modality"] == "image"
    assert (hit["metadata"]["width"], hit["metadata"]["height"]) == (32, 32)


def test_an_image_or_a_stored_document_finds_itself_first(
    pics: dict[str, Any], stickers: dict[str, list[Any]]
) -> None:
    from aifab.rag import search

    i = ROWS - 3
    out = search("pics", image=stickers["image"][i], k=3)
    assert out["mode"] == "dense" and out["results"][0]["document"] == f"p{i}.png"
    assert out["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    url = "data:image/png;base64," + base64.b64encode(stickers["image"][i]).decode()
    assert search("pics", image=url, k=1)["results"][0]["document"] == f"p{i}.png"
    assert search("pics", like=f"p{i}.png", k=1)["results"][0]["document"] == f"p{i}.png"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"image": "A" * 2_000_000}, "over max_image_bytes (1048576)"),
        ({"image": b"not an image at all"}, "image: not a readable image"),
        ({"image": "%%%"}, "image: not valid base64"),
        ({"image": b"x", "query": "a red circle"}, "give exactly one of"),
        ({"image": b"x", "mode": "bm25"}, "not bm25"),
        ({}, "give exactly one of"),
    ],
)
def test_bad_image_queries_are_refused_naming_why(
    pics: dict[str, Any], kwargs: dict[str, Any], message: str
) -> None:
    from aifab.rag import search

    with pytest.raises(InvalidInputError, match=re.escape(message)):
        search("pics", **kwargs)


def test_a_dataset_column_of_image_bytes_is_a_source(stickers: dict[str, list[Any]]) -> None:
    from aifab.rag import create_kb, search

    kb = create_kb(
        "lake-pics",
        "parcels",
        image_column="image",
        text_column="caption",
        config={"embedder": "parcels-clip@1"},
    )
    assert kb["counts"]["documents"] == ROWS and kb["quarantine"] == []
    hit = search("lake-pics", image=stickers["image"][7], k=1)["results"][0]
    assert hit["document"] == "parcels:7" and hit["text"] == stickers["caption"][7]
    assert hit["metadata"]["route"] == stickers["route"][7]  # the row's fields ride along
    with pytest.raises(InvalidInputError, match="holds VARCHAR, not image bytes"):
        create_kb("nope", "parcels", image_column="caption")


def test_a_pipeline_step_builds_an_image_kb_once(
    stickers: dict[str, list[Any]], tmp_path: Path
) -> None:
    from aifab.pipeline.runner import run_pipeline

    (tmp_path / "p.yaml").write_text(
        "name: image-kb\nsteps:\n  - name: pics\n    uses: kb_build\n    with: {name: pipe, "
        "from: parcels, image_column: image, config: {embedder: parcels-clip@1}}\n"
    )
    first, again = run_pipeline(tmp_path / "p.yaml"), run_pipeline(tmp_path / "p.yaml")
    assert first.ok and again.ok, [(s.name, s.error) for s in first.steps + again.steps]
    details = [s.outputs["details"] for s in (*first.steps, *again.steps)]
    assert [d["action"] for d in details] == ["created", "unchanged"]
    assert details[0]["documents"] == ROWS


def test_a_text_only_embedder_refuses_image_documents(folder: Path, tmp_path: Path) -> None:
    from aifab.rag import create_kb

    (tmp_path / "one.png").write_bytes((folder / "p100.png").read_bytes())
    with pytest.raises(InvalidInputError, match="embeds text only; image documents need"):
        create_kb("words", str(tmp_path), config={"embedder": "builtin:all-minilm-l6-v2"})


def test_cli_creates_and_searches_by_text_and_by_image(
    cli: Any, folder: Path, stickers: dict[str, list[Any]]
) -> None:
    r = cli("kb", "create", "pics-cli", "--from", folder, "--embedder", "parcels-clip@1")
    assert r.exit_code == 0, r.stderr
    assert "24 documents" in r.stdout and "quarantined broken.png" in r.stdout
    caption = stickers["caption"][ROWS - 1]
    r = cli("kb", "search", "pics-cli", caption, "--mode", "dense")
    assert r.exit_code == 0, r.stderr
    assert "[image 32x32]" in r.stdout
    r = cli("kb", "search", "pics-cli", "--image", folder / f"p{ROWS - 2}.png", "-k", "2", "--json")
    assert r.exit_code == 0, r.stderr
    assert f'"document": "p{ROWS - 2}.png"' in r.stdout.split('"results"', 1)[1][:400]
    r = cli("kb", "search", "pics-cli")
    assert r.exit_code != 0 and "give exactly one of" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_http_and_dashboard_search_images(
    pics: dict[str, Any], stickers: dict[str, list[Any]], live_server: Any
) -> None:
    import httpx

    from aifab.serve.keys import create_key

    _, secret = create_key("developer", name="pics")
    server = live_server()
    caption = stickers["caption"][ROWS - 1]
    image = base64.b64encode(stickers["image"][ROWS - 4]).decode()
    with httpx.Client(base_url=server.url, timeout=60) as http:
        auth = {"Authorization": f"Bearer {secret}"}
        r = http.post("/v1/kb/pics/search", json={"query": caption, "k": 3}, headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["image"].startswith("data:image/png;base64,")
        r = http.post("/v1/kb/pics/search", json={"image": image, "k": 1}, headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["document"] == f"p{ROWS - 4}.png"
        r = http.post("/v1/kb/pics/search", json={"image": "A" * 1_500_000}, headers=auth)
        assert r.status_code == 422 and "max_image_bytes" in r.json()["error"]["message"]
        docs = [{"id": "up.png", "image": image, "text": "uploaded"}, {"id": "bad", "image": "x"}]
        r = http.post("/v1/kb/pics/documents", json={"documents": docs}, headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["counts"]["documents"] == 25
        assert [q["document"] for q in r.json()["quarantine"]] == ["bad"]
        body = {"name": "lake", "source": "parcels", "image_column": "image"}
        r = http.post(
            "/v1/kb", json={**body, "config": {"embedder": "parcels-clip@1"}}, headers=auth
        )
        assert r.status_code == 201, r.text
        assert r.json()["counts"]["documents"] == ROWS
        r = http.post("/ui/login", data={"key": secret, "next": "/ui"})
        assert r.status_code in (200, 303), r.text
        r = http.get("/ui/kb/pics", params={"q": caption, "mode": "dense"})
        assert r.status_code == 200, r.text
        assert '<img class="thumb" src="data:image/png;base64,' in r.text
        assert "more like this" in r.text
        r = http.get("/ui/kb/pics", params={"like": "up.png"})
        assert r.status_code == 200 and "Documents like up.png" in r.text
