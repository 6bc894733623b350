"""Loop pieces (schedule, accumulation, clipping, autocast, early stopping, batch order) and the
train-state checkpoint: a run stopped mid-epoch and resumed ends bitwise equal to one never
stopped."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from aifab.core.errors import InvalidInputError
from aifab.train import checkpointing, datasets, distributed, loop


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread (and the machine is shared); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_warmup_cosine_shape() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = loop.warmup_cosine(opt, warmup_steps=4, total_steps=14, min_lr_ratio=0.1)
    lrs = []
    for _ in range(16):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))
    assert lrs[9] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert lrs[14] == pytest.approx(0.1) and lrs[15] == pytest.approx(0.1)


def test_update_steps_cover_accumulation_windows_and_epoch_end() -> None:
    got = [b for b in range(7) if loop.is_update_step(b, 3, 7)]
    assert got == [2, 5, 6]
    assert [b for b in range(4) if loop.is_update_step(b, 1, 4)] == [0, 1, 2, 3]


def test_clip_gradients_reports_norm_and_clips() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    assert loop.clip_gradients([p], None) == pytest.approx(5.0)
    assert torch.equal(p.grad, torch.tensor([3.0, 4.0]))
    assert loop.clip_gradients([p], 1.0) == pytest.approx(5.0)
    assert float(p.grad.norm()) == pytest.approx(1.0, rel=1e-5)


def test_autocast_bf16_is_opt_in() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    cpu = torch.device("cpu")
    with loop.autocast(cpu, enabled=False):
        assert (a @ b).dtype == torch.float32
    with loop.autocast(cpu, enabled=True):
        assert (a @ b).dtype == torch.bfloat16


def test_early_stopping_patience_and_state() -> None:
    es = loop.EarlyStopping("max", patience=2, min_delta=0.01)
    assert es.update(0.5, 1) and not es.should_stop
    assert not es.update(0.505, 2)  # within min_delta: not better
    assert es.update(0.6, 3)
    assert not es.update(0.59, 4) and not es.update(0.6, 5)
    assert es.should_stop and es.best == 0.6 and es.best_step == 3
    again = loop.EarlyStopping("max", patience=2)
    again.load_state_dict(es.state_dict())
    assert again.should_stop and again.best_step == 3
    low = loop.EarlyStopping("min", patience=1)
    assert low.update(1.0, 1) and low.update(0.5, 2) and not low.update(0.7, 3)


def test_epoch_batches_are_seeded_per_epoch_and_shards_partition_them() -> None:
    a = datasets.epoch_batches(10, 4, seed=1, epoch=0)
    assert [len(b) for b in a] == [4, 4, 2]
    assert sorted(np.concatenate(a).tolist()) == list(range(10))
    assert all(
        np.array_equal(x, y)
        for x, y in zip(a, datasets.epoch_batches(10, 4, seed=1, epoch=0), strict=True)
    )
    other = np.concatenate(datasets.epoch_batches(10, 4, seed=1, epoch=1))
    assert not np.array_equal(np.concatenate(a), other)
    assert [len(b) for b in datasets.epoch_batches(10, 4, seed=1, epoch=0, drop_last=True)] == [
        4,
        4,
    ]
    batch = np.arange(5)
    parts = [distributed.shard(batch, distributed.DistInfo(r, 2, r, "gloo")) for r in (0, 1)]
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4]]


def test_rng_state_round_trip() -> None:
    loop.seed_everything(3)
    state = checkpointing.rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(3)  # move every generator on
    checkpointing.set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def _setup(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, object]:
    loop.seed_everything(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 3)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = loop.warmup_cosine(opt, warmup_steps=3, total_steps=24, min_lr_ratio=0.1)
    return model, opt, sched


def _train(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: object,
    *,
    start: tuple[int, int, int] = (0, 0, 0),
    stop_at: int | None = None,
    ckpt_dir: Path | None = None,
) -> int:
    """A miniature classify loop (accumulation 2, clipping, dropout); returns the last step."""
    g = np.random.default_rng(0)
    x = torch.from_numpy(g.normal(size=(50, 5)).astype(np.float32))
    y = torch.from_numpy(g.integers(0, 3, size=50))
    step, epoch, first = start
    while step < 24:
        batches = datasets.epoch_batches(50, 8, seed=7, epoch=epoch)  # 7 batches, 4 updates
        for b in range(first, len(batches)):
            idx = torch.from_numpy(batches[b])
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx]) / 2
            loss.backward()
            if not loop.is_update_step(b, 2, len(batches)):
                continue
            loop.clip_gradients(model.parameters(), 1.0)
            opt.step()
            sched.step()  # type: ignore[attr-defined]
            opt.zero_grad(set_to_none=True)
            step += 1
            if ckpt_dir is not None and step % 5 == 0:
                pos = (epoch + 1, 0) if b + 1 == len(batches) else (epoch, b + 1)
                checkpointing.save_checkpoint(
                    ckpt_dir,
                    step=step,
                    model=model.state_dict(),
                    optimizer=opt.state_dict(),
                    scheduler=sched.state_dict(),  # type: ignore[attr-defined]
                    position={"epoch": pos[0], "batch": pos[1]},
                    extra={"note": "mid-epoch"},
                )
            if step == stop_at:
                return step
        epoch, first = epoch + 1, 0
    return step


def test_resume_mid_epoch_is_bitwise_exact(tmp_path: Path) -> None:
    model, opt, sched = _setup()
    _train(model, opt, sched)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    model, opt, sched = _setup()
    _train(model, opt, sched, stop_at=12, ckpt_dir=tmp_path)  # "killed" after step 12
    latest = checkpointing.latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "step-000000010.pt"
    assert [p.name for p in checkpointing.list_checkpoints(tmp_path)] == [
        "step-000000005.pt",
        "step-000000010.pt",
    ]

    model, opt, sched = _setup(seed=99)  # fresh process: different init, RNG moved on
    torch.rand(10)
    state = checkpointing.load_checkpoint(latest)
    assert state["position"]["batch"] > 0, "the checkpoint should be mid-epoch"
    assert state["extra"] == {"note": "mid-epoch"}
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])  # type: ignore[attr-defined]
    pos = state["position"]
    _train(model, opt, sched, start=(state["step"], pos["epoch"], pos["batch"]))
    got = model.state_dict()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_checkpoint_files_keep_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert checkpointing.latest_checkpoint(None) is None
    assert checkpointing.latest_checkpoint(tmp_path / "none") is None
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(m.parameters())
    for step in (3, 1, 2):
        checkpointing.save_checkpoint(
            tmp_path,
            step=step,
            model=m.state_dict(),
            optimizer=opt.state_dict(),
            scheduler=None,
            position={"epoch": 0, "batch": step},
            keep=2,
        )
    (tmp_path / ".step-000000009.pt.abc.tmp").write_bytes(b"partial")
    assert [p.name for p in checkpointing.list_checkpoints(tmp_path)] == [
        "step-000000002.pt",
        "step-000000003.pt",
    ]
    bad = tmp_path / "step-000000010.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InvalidInputError, match="step-000000010.pt: not a readable checkpoint"):
        checkpointing.load_checkpoint(bad)
    monkeypatch.setenv(checkpointing.ENV_VAR, str(tmp_path / "env"))
    assert checkpointing.checkpoint_dir(None) == tmp_path / "env"
    assert checkpointing.checkpoint_dir(str(tmp_path / "cfg")) == tmp_path / "cfg"
    monkeypatch.delenv(checkpointing.ENV_VAR)
    assert checkpointing.checkpoint_dir(None) is None
