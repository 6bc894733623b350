"""Model tests run tiny tensors on shared cores: one intra-op thread each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # Several test processes share two cores; extra intra-op threads only contend.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
