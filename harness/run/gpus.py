"""This host's GPUs: which devices there are and which catalog GPU types each one can serve.

Detection order: ``CUDA_VISIBLE_DEVICES`` (which devices we may use; empty or ``-1`` means none),
then NVML (``pynvml``, when installed), then ``nvidia-smi`` for the device names. A device serves
every GPU type whose ``device_names`` (fnmatch patterns from the catalog's GPU-type table) match
its name. No NVIDIA driver: no GPUs.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stagebot.stages.catalog import GpuType


@dataclass(frozen=True)
class Device:
    id: str  # the CUDA index, as CUDA_VISIBLE_DEVICES names it
    name: str  # e.g. "NVIDIA H200"


def detect_devices(env: Mapping[str, str] | None = None) -> list[Device]:
    """The GPUs this process may use, in CUDA_VISIBLE_DEVICES order."""
    env = os.environ if env is None else env
    devices = _nvml_devices() or _smi_devices()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return devices
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not wanted or wanted[0] == "-1":
        return []
    by_id = {device.id: device for device in devices}
    return [by_id[v] for v in wanted if v in by_id]


def gpu_types_of(device: Device, gpu_types: Mapping[str, GpuType]) -> list[str]:
    """The catalog GPU types this device can serve (by device-name pattern)."""
    return [gpu.name for gpu in gpu_types.values() if matches(device, gpu.device_names)]


def matches(device: Device, device_names: Iterable[str]) -> bool:
    """Whether ``device``'s name matches one of the device-name patterns (fnmatch)."""
    return any(fnmatch.fnmatchcase(device.name, pattern) for pattern in device_names)


def describe(devices: list[Device]) -> str:
    if not devices:
        return "no GPU"
    names = sorted({device.name for device in devices})
    return f"{len(devices)} GPU(s): {', '.join(names)}"


def _nvml_devices() -> list[Device]:
    try:
        import pynvml  # optional
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: no GPUs
        return []
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            devices.append(Device(str(index), name.decode() if isinstance(name, bytes) else name))
        return devices
    finally:
        pynvml.nvmlShutdown()


def _smi_devices() -> list[Device]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    devices = []
    for line in out.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            devices.append(Device(index.strip(), name.strip()))
    return devices
