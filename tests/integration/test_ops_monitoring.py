"""Monitors on a live server: request ids, feedback, drift of shifted traffic, alerts, metrics.

A real uvicorn server serves the quickstart churn model; a local HTTP receiver stands in for a
team's alert webhook and checks the HMAC signature of what it gets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aifab.inference.deployments import create_deployment, list_deployments
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration

INPUTS = [
    "age",
    "income",
    "monthly_spend",
    "support_tickets",
    "plan",
    "country",
    "signup_date",
    "ticket_text",
]
SECRET = "hook-secret"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def records(split: str = "test") -> list[dict[str, Any]]:
    """Raw input rows of the quickstart data, JSON-ready."""
    from aifab.data import query

    cols = ", ".join(INPUTS)
    table = query(
        f"SELECT {cols} FROM customers_split WHERE split = '{split}' ORDER BY customer_id"
    )
    rows = table.to_pylist()
    for r in rows:
        r["signup_date"] = r["signup_date"].isoformat() if r["signup_date"] else None
    return rows


NEW_MARKET_TICKETS = [
    "Olá, o pagamento via Pix falhou de novo e o boleto não chegou.",
    "Bom dia! Não consigo emitir a nota fiscal, o aplicativo trava na tela de cobrança.",
    "A fatura veio em dólar e não em reais, por favor corrijam o valor.",
    "Preciso cancelar a assinatura, o suporte em português demora demais para responder.",
    "O app não aceita meu CPF no cadastro, já tentei várias vezes.",
]


def shifted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The traffic of a new market: a new country, older customers, inflated incomes, and
    tickets written in Portuguese about local payment methods."""
    return [
        {
            **r,
            "country": "BR",
            "income": (r["income"] or 0) * 3 + 50_000,
            "age": (r["age"] or 30) + 25,
            "ticket_text": f"{NEW_MARKET_TICKETS[i % 5]} Pedido {i}.",
        }
        for i, r in enumerate(rows)
    ]


class Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["content-length"]))
        ts = self.headers["x-aifab-timestamp"]
        want = (
            "sha256="
            + hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        )
        Hook.received.append(
            {
                "ok": hmac.compare_digest(want, self.headers["x-aifab-signature"]),
                "body": json.loads(body),
            }
        )
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def env(churn_model: dict[str, Any], live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    import os

    os.environ["OPS_HOOK_SECRET"] = SECRET
    hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    if "churn" not in {d["name"] for d in list_deployments()}:
        create_deployment("churn@champion", name="churn")
    create_deployment("churn@champion", name="churn-shift")
    create_deployment("churn@champion", name="churn-idle")
    server = live_server(reconcile_interval_s=0.2)
    # The jobs worker on a thread of the serving process, as `aifab serve` hosts it: it runs
    # the retraining jobs of the closed loop.
    from aifab.jobs.worker import Worker

    worker = Worker()
    stop_worker = threading.Event()
    worker_thread = threading.Thread(target=worker.run, args=(stop_worker,), daemon=True)
    worker_thread.start()
    _, secret = create_key("admin", name="ops-test", rate=None)  # traffic loops outrun 600/min
    client = httpx.Client(
        base_url=server.url, headers={"authorization": f"Bearer {secret}"}, timeout=60
    )
    yield {
        "client": client,
        "server": server,
        "hook": f"http://127.0.0.1:{hook.server_address[1]}/hook",
        "worker": worker.id,
    }
    stop_worker.set()
    worker_thread.join(timeout=30)
    client.close()
    hook.shutdown()
    hook.server_close()
    os.environ.pop("OPS_HOOK_SECRET", None)


def _predict(
    client: httpx.Client, deployment: str, rows: list[dict[str, Any]]
) -> list[tuple[str, int]]:
    """Send ``rows`` in calls of 10; return each call's request id and row count."""
    ids = []
    for i in range(0, len(rows), 10):
        batch = rows[i : i + 10]
        r = client.post(f"/v1/predict/{deployment}", json={"records": batch})
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == r.json()["request_id"]
        ids.append((r.json()["request_id"], len(batch)))
    return ids


def _spec(env: dict[str, Any], deployment: str, **extra: Any) -> dict[str, Any]:
    return {
        "deployment": deployment,
        "min_rows": 30,
        "quality": {"min_accuracy": 0.9, "min_labels": 10},
        "objectives": {"latency_p99_ms": 5000, "error_rate": 0.5},
        "sinks": [{"type": "webhook", "url": env["hook"], "secret_env": "OPS_HOOK_SECRET"}],
        **extra,
    }


def test_unshifted_traffic_does_not_drift_and_labels_give_quality(env) -> None:
    c = env["client"]
    rows = records()
    ids = _predict(c, "churn", rows)
    r = c.post("/v1/monitors", json={"name": "churn-mon", "spec": _spec(env, "churn")})
    assert r.status_code == 201, r.text
    result = c.post("/v1/monitors/churn-mon/run").json()
    assert result["status"] == "ok", result["report"]
    v = result["values"]
    assert v["rows"] == len(rows) and v["dataset_drift"] == 0.0 and v["labelled"] == 0
    drift = result["report"]["drift"]
    assert set(drift["columns"]) == set(INPUTS)
    assert drift["reference"]["dataset"].startswith("customers_split@")
    text = drift["columns"]["ticket_text"]  # free text: compared by a domain classifier
    assert text["kind"] == "text" and text["tests"]["domain_classifier"]["drift"] is False
    assert text["tests"]["domain_classifier"]["value"] < 0.7 and not drift["skipped"]
    # Delayed labels: all wrong, so quality breaches once enough have arrived.
    for rid, n in ids:
        fb = c.post("/v1/feedback", json={"request_id": rid, "labels": ["nonsense"] * n})
        assert fb.status_code == 200 and fb.json()["matched"] is True
    result = c.post("/v1/monitors/churn-mon/run").json()
    assert result["values"]["labelled"] >= 10 and result["values"]["accuracy"] == 0.0
    assert [b["rule"] for b in result["report"]["breaches"]] == ["quality"]
    assert [a["rule"] for a in result["alerts"]] == ["quality"]


def test_feedback_sent_right_after_its_prediction_matches(env) -> None:
    # A deployment of its own: the other tests count each deployment's traffic.
    create_deployment("churn@champion", name="churn-feedback")
    deadline = time.monotonic() + 120
    payload = {"records": records()[:1]}
    while env["client"].post("/v1/predict/churn-feedback", json=payload).status_code != 200:
        assert time.monotonic() < deadline, "churn-feedback never loaded"
        time.sleep(0.2)
    log = env["server"].app.state.request_log
    # Hold the request log's batch back (as a busy server's interval does): the feedback must
    # still find its prediction (it answered matched: false until the batch was written).
    log.flush_interval_s = 3600.0
    log.flush()
    try:
        [(rid, n)] = _predict(env["client"], "churn-feedback", records()[:3])
        fb = env["client"].post("/v1/feedback", json={"request_id": rid, "labels": ["x"] * n})
        assert fb.status_code == 200 and fb.json()["matched"] is True, fb.text
    finally:
        log.flush_interval_s = 0.5
        log.flush()


def test_shifted_traffic_drifts_alerts_the_webhook_and_is_exported(env) -> None:
    c = env["client"]
    _predict(c, "churn-shift", shifted(records()))
    assert (
        c.post(
            "/v1/monitors",
            json={
                "name": "shift-mon",
                "spec": _spec(
                    env, "churn-shift", drift={"drift_share": 0.3, "embed_text": ["ticket_text"]}
                ),
            },
        ).status_code
        == 201
    )
    result = c.post("/v1/monitors/shift-mon/run").json()
    assert result["status"] == "breach"
    drift = result["report"]["drift"]
    assert {"age", "income", "country"} <= set(drift["drifted"])
    assert "plan" not in drift["drifted"]
    # The Portuguese tickets: the text classifier and the embeddings of the text both see it.
    tickets = drift["columns"]["ticket_text"]
    assert tickets["tests"]["domain_classifier"]["value"] > 0.95
    assert "pedido" in tickets["words"]["current"]  # in every new ticket, in no old one
    assert {"ticket_text", "ticket_text:embedding"} <= set(drift["drifted"])
    emb = drift["columns"]["ticket_text:embedding"]
    assert emb["dim"] == 384 and emb["tests"]["mean_distance"]["drift"] is True
    assert result["values"]["dataset_drift"] == 1.0
    fired = [b for b in Hook.received if b["body"]["group"] == "churn-shift"]
    assert fired and all(b["ok"] for b in fired)
    assert "data_drift" in {a["rule"] for a in fired[-1]["body"]["alerts"]}
    text = c.get("/metrics").text  # with the admin key: every series
    samples = {
        (s.name, s.labels.get("monitor"), s.labels.get("name") or s.labels.get("column")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("aifab_monitor_value", "shift-mon", "drift_share")] == drift["share"]
    assert samples[("aifab_monitor_column_drift", "shift-mon", "country")] == 1.0
    assert samples[("aifab_monitor_column_drift", "shift-mon", "ticket_text")] == 1.0
    auc = samples[("aifab_monitor_value", "shift-mon", "domain_classifier:ticket_text")]
    assert auc == tickets["tests"]["domain_classifier"]["value"]
    assert samples[("aifab_alerts_firing", "shift-mon", None)] >= 1.0
    hist = c.get("/v1/monitors/shift-mon/history").json()
    assert hist[0]["status"] == "breach"


def test_no_traffic_and_missing_reference_are_reported_not_raised(env) -> None:
    c = env["client"]
    assert (
        c.post("/v1/monitors", json={"name": "idle", "spec": _spec(env, "churn-idle")}).status_code
        == 201
    )
    r = c.post("/v1/monitors/idle/run").json()
    assert r["status"] == "no_data" and "no traffic in the window" in r["report"]["notes"]
    spec = _spec(env, "churn", drift={"reference": "customers_gone@1"})
    assert c.post("/v1/monitors", json={"name": "gone", "spec": spec}).status_code == 201
    r = c.post("/v1/monitors/gone/run").json()
    assert r["status"] in ("error", "breach")
    assert any("customers_gone" in n for n in r["report"]["notes"])
    spec = _spec(env, "churn", features=["age", "loyalty_points"])
    c.post("/v1/monitors", json={"name": "partial", "spec": spec})
    r = c.post("/v1/monitors/partial/run").json()
    assert "column loyalty_points missing from the reference" in r["report"]["notes"]
    assert list(r["report"]["drift"]["columns"]) == ["age"]
    # An embedding model that does not exist: the text is still compared, the run is a note.
    drift = {"embed_text": ["ticket_text"], "embedding_model": "ghost-embedder@1"}
    spec = _spec(env, "churn", features=["ticket_text"], drift=drift)
    c.post("/v1/monitors", json={"name": "no-embedder", "spec": spec})
    r = c.post("/v1/monitors/no-embedder/run").json()
    assert any(n.startswith("ticket_text: not embedded: ") for n in r["report"]["notes"]), r
    assert list(r["report"]["drift"]["columns"]) == ["ticket_text"]


def test_bad_input_gets_4xx_naming_the_field(env) -> None:
    c = env["client"]
    r = c.post(
        "/v1/monitors",
        json={"name": "bad", "spec": {"deployment": "churn", "drift": {"tests": ["nope"]}}},
    )
    assert r.status_code == 422 and "nope" in r.text
    r = c.post(
        "/v1/monitors", json={"name": "bad", "spec": {"deployment": "churn", "window_s": -1}}
    )
    assert r.status_code == 422 and "window_s" in r.text
    for drift, named in (
        ({"text_tests": ["bogus"]}, "text_tests"),
        ({"kinds": {"ticket_text": "vector"}}, "vector"),
        ({"embedding_distance": "manhattan"}, "embedding_distance"),
        ({"feature_thresholds": {"ticket_text": {"auc": 0.6}}}, "auc"),
    ):
        spec = {"deployment": "churn", "drift": drift}
        r = c.post("/v1/monitors", json={"name": "bad", "spec": spec})
        assert r.status_code == 422 and named in r.text, (drift, r.text)
    assert c.post("/v1/feedback", json={"request_id": "x"}).status_code == 422
    assert c.post("/v1/feedback", json={"request_id": "x", "labels": [{"a": 1}]}).status_code == 422
    assert c.get("/v1/monitors/nope").status_code == 404
    assert c.post("/v1/monitors/nope/run").status_code == 404
    assert (
        c.post(
            "/v1/monitors", json={"name": "churn-mon", "spec": {"deployment": "churn"}}
        ).status_code
        == 409
    )


def test_cli_shows_monitors_and_alerts(env, cli) -> None:
    r = cli("monitor", "list")
    assert r.exit_code == 0 and "shift-mon" in r.stdout
    r = cli("monitor", "show", "shift-mon")
    assert r.exit_code == 0 and "DRIFT" in r.stdout and "breach: data_drift" in r.stdout
    assert "domain_classifier=" in r.stdout and "words now: " in r.stdout
    r = cli("alerts", "list", "--state", "firing")
    assert r.exit_code == 0 and "data_drift" in r.stdout
    r = cli("alerts", "silence", "--monitor", "shift-mon", "--for", "2h", "--reason", "new market")
    assert r.exit_code == 0 and "silence" in r.stdout
    r = cli("alerts", "history")
    assert r.exit_code == 0 and "delivered" in r.stdout
    r = cli("alerts", "silence", "--for", "2h")
    assert r.exit_code != 0 and "--rule and/or --monitor" in r.stderr
    r = cli("monitor", "run", "nope")
    assert r.exit_code != 0 and "no monitor 'nope'" in r.stderr


def test_exported_rules_and_dashboard_name_only_exported_metrics(env, cli, tmp_path: Path) -> None:
    import yaml

    from aifab.ops.export_rules import label_mismatches, metric_names

    r = cli("ops", "export-rules", "--out", tmp_path)
    assert r.exit_code == 0, r.stderr
    rules = yaml.safe_load((tmp_path / "aifab-alerts.rules.yml").read_text())
    dash = json.loads((tmp_path / "aifab-dashboard.json").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule)
    assert all(p["targets"][0]["expr"] for p in dash["panels"])
    # a labelled counter has samples once it counted something: make one error
    assert env["client"].post("/v1/predict/churn", json={"records": [{}]}).status_code == 422
    text = env["client"].get("/metrics").text  # with the admin key: every series
    exported = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    named = metric_names(rules) | metric_names(dash)
    assert "aifab_monitor_value" in named and "aifab_request_latency_seconds_bucket" in named
    assert named <= exported, named - exported
    # and every label a query groups by, matches on or templates (issue 23 item 3)
    labels_of: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            labels_of.setdefault(sample.name, set()).update(sample.labels)
    assert label_mismatches(labels_of) == []


def test_pipeline_steps_monitor_and_gate(env, tmp_path: Path) -> None:
    from aifab.pipeline.runner import run_pipeline

    pipe = tmp_path / "watch.yaml"
    pipe.write_text(
        "name: watch\n"
        "steps:\n"
        "  - {name: watch, uses: monitor, with: {name: shift-mon}}\n"
        "  - name: judge\n"
        "    uses: gate\n"
        "    with: {candidate: churn@1, champion: churn@champion, tolerance: 0.0}\n"
        "  - name: strict\n"
        "    uses: gate\n"
        "    with: {candidate: churn@1, champion: churn@champion, latency_p99_ms: 0.000001}\n"
    )
    result = run_pipeline(pipe)
    by = {s.name: s for s in result.steps}
    assert by["watch"].error is None and by["watch"].outputs["details"]["status"] == "breach"
    assert by["judge"].error is None
    assert by["strict"].error and "latency_p99_ms" in by["strict"].error
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsteps:\n  - {name: g, uses: gate, with: {champion: churn@1}}\n")
    result = run_pipeline(bad)
    assert "exactly one of 'candidate' and 'from'" in (result.steps[0].error or "")


# The closed loop, last in this module: promotion moves churn@champion for every deployment.

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _policy(**gate: Any) -> dict[str, Any]:
    return {
        "deployment": "churn",
        "model": "churn",
        "trigger": {"monitor": "churn-mon", "rules": ["quality", "data_drift"]},
        "retrain": {
            "recipe": "classify",
            "config": str(EXAMPLES / "quickstart" / "train.yaml"),
            "overrides": ["epochs=8"],
        },
        "gate": {
            "tolerance": 0.5,
            "fairness": {"sensitive": "country"},
            "traffic": {"min_labels": 10},
            **gate,
        },
        "canary": {"weight": 50, "window_s": 2, "min_requests": 5, "max_wait_s": 60},
        "cooldown_s": 0,
    }


def run_policy(name: str) -> dict[str, Any]:
    """``aifab policy run NAME`` in its own process, as an operator runs it; the retraining
    job it submits is run by the worker thread of this (serving) process."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "aifab", "policy", "run", name, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _served_model(c: httpx.Client) -> str:
    r = c.post("/v1/predict/churn", json={"records": records()[:1]})
    assert r.status_code == 200, r.text
    return str(r.json()["model"])


def test_gate_failure_changes_nothing_for_clients(env) -> None:
    from aifab.ops.policy.service import create_policy
    from aifab.track.registry import resolve_model

    c = env["client"]
    before = resolve_model("churn@champion")["version"]
    served = _served_model(c)
    create_policy("strict", _policy(latency_p99_ms=0.000001))  # no model is that fast
    out = run_policy("strict")
    assert out["outcome"] == "gate_failed" and "latency_p99_ms" in out["why"], out
    steps = [s["step"] for s in out["steps"]]
    assert steps == ["trigger", "retrain", "candidate", "gate"]
    assert resolve_model("churn@champion")["version"] == before
    d = c.get("/v1/deployments/churn").json()
    assert d["canary"] is None
    assert _served_model(c) == served


def _labelled_requests(c: httpx.Client, deployment: str, rows: list[dict[str, Any]]) -> list:
    """Predict ``rows`` in calls of 10; return (request id, served labels, serving model)."""
    out = []
    for i in range(0, len(rows), 10):
        r = c.post(f"/v1/predict/{deployment}", json={"records": rows[i : i + 10]})
        assert r.status_code == 200, r.text
        body = r.json()
        labels = [p["label"] for p in body["predictions"]]
        out.append((body["request_id"], labels, body["model"]))
    return out


def test_gate_scores_recent_labelled_traffic(env) -> None:
    from aifab.inference.loading import load_served_model
    from aifab.ops.gate import evaluate_gate
    from aifab.ops.policy.spec import GateSpec
    from aifab.track.registry import resolve_model

    c = env["client"]
    champion = f"churn@{resolve_model('churn@champion')['version']}"
    candidate = f"churn@{resolve_model('churn@challenger')['version']}"  # the strict run's
    create_deployment("churn@champion", name="churn-labelled")
    deadline = time.monotonic() + 60
    while c.post("/v1/predict/churn-labelled", json={"records": records()[:1]}).status_code != 200:
        assert time.monotonic() < deadline, "churn-labelled never came up"
        time.sleep(0.2)
    rows = records()
    served = _labelled_requests(c, "churn-labelled", rows)
    cand = load_served_model(candidate).handler
    theirs = [cand.encode(p)["label"] for p in cand.predict(cand.decode({"records": rows}))]
    ours = [label for _, labels, _ in served for label in labels]
    differ = sum(a != b for a, b in zip(ours, theirs, strict=True))
    assert differ > 0, "the candidate agrees with the champion on every row: nothing to test"
    # The truth that arrives later is what the champion said: it is right on all of them.
    for rid, labels, _ in served:
        fb = c.post("/v1/feedback", json={"request_id": rid, "labels": labels})
        assert fb.status_code == 200
    # The request log is written by a background writer: wait for every labelled row (a CI run
    # evaluated the gate before the last batch was written).
    from aifab.ops.feedback import labelled_traffic

    deadline = time.monotonic() + 30
    while len(labelled_traffic("churn-labelled", 0.0)) < len(rows):
        assert time.monotonic() < deadline, "the labelled requests never reached the log"
        time.sleep(0.2)
    spec = GateSpec.model_validate({"tolerance": 0.0, "traffic": {"min_labels": len(rows)}})
    result, basis = evaluate_gate(candidate, champion, spec, "churn-labelled")
    traffic = basis["traffic"]
    assert traffic["used"] and traffic["labelled"] == len(rows)
    assert traffic["champion"]["accuracy"] == 1.0
    assert traffic["candidate"]["accuracy"] == pytest.approx(1 - differ / len(rows))
    check = next(ch for ch in result.checks if ch.name == "accuracy_recent_traffic")
    assert not check.passed and not result.passed and "champion 1.0000" in check.detail
    # Too few labels: the record says so and only the hold-out is judged.
    spec = GateSpec.model_validate({"tolerance": 1.0, "traffic": {"min_labels": len(rows) + 1}})
    result, basis = evaluate_gate(candidate, champion, spec, "churn-labelled")
    assert not basis["traffic"]["used"] and "hold-out only" in basis["traffic"]["why"]
    assert [ch.name for ch in result.checks] == ["accuracy"] and result.passed


def test_failed_retraining_alerts_and_changes_nothing_for_clients(env) -> None:
    from aifab.ops.alerts import list_alerts
    from aifab.ops.policy.service import create_policy
    from aifab.track.registry import resolve_model

    c = env["client"]
    before = resolve_model("churn@champion")["version"]
    served = _served_model(c)
    policy = _policy()
    # A broken recipe config that validates but fails in the job (MLP has no such option).
    policy["retrain"]["overrides"] = ["epochs=1", "model.config={nonsense: 1}"]
    policy["sinks"] = [{"type": "webhook", "url": env["hook"], "secret_env": "OPS_HOOK_SECRET"}]
    create_policy("broken", policy)
    seen = len(Hook.received)
    out = run_policy("broken")
    assert out["outcome"] == "failed" and out["why"].startswith("retraining failed: job "), out
    assert [s["step"] for s in out["steps"]] == ["trigger", "retrain", "alert"]
    notes = [n for n in Hook.received[seen:] if n["body"]["group"] == "churn"]
    assert len(notes) == 1 and notes[0]["ok"]
    [alert] = notes[0]["body"]["alerts"]
    assert (alert["rule"], alert["monitor"], alert["state"]) == (
        "retrain_failed",
        "policy:broken",
        "firing",
    )
    assert out["why"] in alert["message"]
    assert [a["rule"] for a in list_alerts("firing") if a["monitor"] == "policy:broken"] == [
        "retrain_failed"
    ]
    again = run_policy("broken")  # fails again: the same alert, not a second notice
    assert again["outcome"] == "failed"
    assert len([n for n in Hook.received[seen:] if n["body"]["group"] == "churn"]) == 1
    assert resolve_model("churn@champion")["version"] == before
    assert c.get("/v1/deployments/churn").json()["canary"] is None
    assert _served_model(c) == served


def test_canary_worse_on_labelled_feedback_is_rolled_back(env) -> None:
    from aifab.ops.policy.service import create_policy
    from aifab.track.registry import resolve_model

    c = env["client"]
    before = resolve_model("churn@champion")["version"]
    primary = _served_model(c)
    policy = _policy()
    policy["canary"] = {
        "weight": 50,
        "window_s": 120,
        "min_requests": 5,
        "max_wait_s": 120,
        "quality": {"min_labels": 5, "tolerance": 0.1},
    }
    create_policy("quality-watch", policy)
    stop = threading.Event()

    def traffic() -> None:
        # Labels arrive right after each answer: the primary's were right, the canary's wrong.
        rows = records()
        i = 0
        while not stop.is_set():
            for rid, labels, model in _labelled_requests(c, "churn", rows[i % len(rows) :][:2]):
                wrong = ["stay" if label == "churn" else "churn" for label in labels]
                truth = labels if model == primary else wrong
                c.post("/v1/feedback", json={"request_id": rid, "labels": truth})
            i += 2

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        out = run_policy("quality-watch")
    finally:
        stop.set()
        t.join(timeout=30)
    assert out["outcome"] == "rolled_back", out
    watch = next(s for s in out["steps"] if s["step"] == "watch")
    assert watch["decision"] == "rollback" and "canary accuracy 0.000" in watch["why"]
    q = watch["quality"]
    assert q["canary"] == 0.0 and q["primary"] == 1.0 and q["canary_labels"] >= 5
    assert "canary accuracy" in out["why"]
    assert resolve_model("churn@champion")["version"] == before
    assert c.get("/v1/deployments/churn").json()["canary"] is None
    assert _served_model(c) == primary


def test_alert_retrain_gate_canary_promote(env, cli) -> None:
    from aifab.core.audit import AuditEvent
    from aifab.core.db import session_scope
    from aifab.jobs.service import get_job
    from aifab.ops.policy.service import create_policy
    from aifab.track.registry import resolve_model

    c = env["client"]
    before = resolve_model("churn@champion")["version"]
    create_policy("loop", _policy())
    r = cli("policy", "dry-run", "loop")
    assert r.exit_code == 0 and "trigger: yes" in r.stdout and "canary at 50%" in r.stdout
    stop = threading.Event()
    answered: list[str] = []

    def traffic() -> None:  # clients keep calling while the canary is watched
        rows = records()
        while not stop.is_set():
            resp = c.post("/v1/predict/churn", json={"records": rows[:2]})
            answered.append(resp.json().get("model", str(resp.status_code)))

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        out = run_policy("loop")
    finally:
        stop.set()
        t.join(timeout=30)
    assert out["outcome"] == "promoted", out
    candidate = next(s["model"] for s in out["steps"] if s["step"] == "candidate")
    job = get_job(next(s["job"] for s in out["steps"] if s["step"] == "retrain"))
    assert [a["worker_id"] for a in job["attempts"]] == [env["worker"]]  # the server's worker
    steps = [s["step"] for s in out["steps"]]
    assert steps == ["trigger", "retrain", "candidate", "gate", "canary", "watch", "promote"]
    assert resolve_model("churn@champion")["version"] == int(candidate.split("@")[1]) != before
    gate = next(s for s in out["steps"] if s["step"] == "gate")
    assert gate["traffic"]["used"] and gate["traffic"]["labelled"] >= 10
    assert "accuracy_recent_traffic" in [ch["name"] for ch in gate["checks"]]
    assert candidate in answered  # the canary really served clients
    assert "error" not in str(answered)
    with session_scope() as s:
        from sqlalchemy import select

        actions = set(
            s.scalars(select(AuditEvent.action).where(AuditEvent.object == "policy:loop"))
        )
    assert {
        "policy.trigger",
        "policy.retrain",
        "policy.gate",
        "policy.canary",
        "policy.promote",
    } <= actions
    r = cli("policy", "history", "loop")
    assert r.exit_code == 0 and "promoted" in r.stdout and "gate" in r.stdout
    # a second alert right away: the cool-down (now 1 h) holds the next retraining back
    from aifab.core.db import session_scope as scope
    from aifab.ops.tables import PolicyRow

    with scope() as s:
        row = s.get(PolicyRow, "loop")
        assert row is not None
        row.spec = {**row.spec, "cooldown_s": 3600}
    again = run_policy("loop")
    assert again["outcome"] == "skipped" and "cool-down" in again["why"]
