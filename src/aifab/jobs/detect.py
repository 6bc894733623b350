"""What this machine has: CPU cores, memory and GPUs."""

from __future__ import annotations

import os
from functools import lru_cache

from aifab.jobs.resources import Resources


def _memory_mb() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / (1 << 20)


def _gpus() -> int:
    """GPUs via NVML when installed, else torch.cuda where an NVIDIA driver is loaded."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML or no driver: fall through
        pass
    if not os.path.isdir("/proc/driver/nvidia"):
        return 0  # no driver: skip importing torch (seconds) just to learn there is no GPU
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - torch missing or broken CUDA: no GPUs
        return 0


@lru_cache(maxsize=1)
def machine_resources() -> Resources:
    """Detect the CPUs (the ones this process may use), memory and GPUs.

    ``AIFAB_WORKER_CPU``, ``AIFAB_WORKER_MEMORY_MB`` and ``AIFAB_WORKER_GPU`` override detection
    (to carve a smaller worker out of a big machine, or to test gang behaviour).
    """
    cpu = float(os.environ.get("AIFAB_WORKER_CPU") or len(os.sched_getaffinity(0)))
    mem = float(os.environ.get("AIFAB_WORKER_MEMORY_MB") or _memory_mb())
    gpu_env = os.environ.get("AIFAB_WORKER_GPU")
    gpu = int(gpu_env) if gpu_env is not None else _gpus()
    return Resources(cpu, mem, gpu)
