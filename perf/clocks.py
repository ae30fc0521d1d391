"""The GPU's SM clock and power-cap state while a contender is timed, read through NVML.

An H200 holds most DeepSeek shapes of the suite at its 700 W cap, at 1.3-1.8 GHz instead of 1.98, and the
clock at a given moment depends on what ran before and for how long (the GPU's temperature): a peer took
149.1 and 158.5 µs at 1785 and 1620 MHz in two runs minutes apart (H200, 2026-12-03). The suite records
the clock each contender was timed at, so that a reader can tell a kernel's gain from a warmer or cooler
GPU, and the deepseek and window presets time each shape in rounds of rotated order (perf/bench.py
more_rounds).

NVML (libnvidia-ml.so.1, shipped with the driver) is read through ctypes, so nothing needs installing;
where it is missing (no driver, a CPU run) `Nvml.open` returns None and the suite records no clocks.
"""
from __future__ import annotations

import ctypes
import statistics

NVML_CLOCK_SM = 1  # nvmlClockType_t
SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap (the power controller holds the clock down)


class Nvml:
    """One GPU's NVML handle: sm_mhz() and reasons() (the clock-event bitmask), or None where unavailable."""

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle
        # nvmlDeviceGetCurrentClocksEventReasons, or its older name where a driver has only that one
        self._reasons = next((getattr(lib, n) for n in ("nvmlDeviceGetCurrentClocksEventReasons",
                                                        "nvmlDeviceGetCurrentClocksThrottleReasons")
                              if hasattr(lib, n)), None)

    @classmethod
    def open(cls, device=None, loader=ctypes.CDLL):
        try:
            lib = loader("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return None
            handle = ctypes.c_void_p()
            for key in _device_keys(device):
                if lib.nvmlDeviceGetHandleByUUID(key.encode(), ctypes.byref(handle)) == 0:
                    return cls(lib, handle)
            count = ctypes.c_uint()
            if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value == 1:  # no UUID to match
                if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0:
                    return cls(lib, handle)
        except (OSError, AttributeError):
            pass
        return None

    def sm_mhz(self):
        v = ctypes.c_uint()
        return v.value if self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(v)) == 0 else None

    def reasons(self):
        v = ctypes.c_ulonglong()
        if self._reasons is None or self._reasons(self.handle, ctypes.byref(v)) != 0:
            return None
        return v.value


def _device_keys(device):
    """NVML UUIDs ("GPU-...") the torch device may have."""
    try:
        import torch
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:
        return []
    return [uuid] if uuid.startswith("GPU-") else [f"GPU-{uuid}"]


class ClockSampler:
    """Samples of (SM MHz, clock-event reasons) taken while replays run; summary() for the record."""

    def __init__(self, nvml):
        self.nvml, self.samples = nvml, []

    def sample(self):
        if self.nvml is None:
            return
        try:
            mhz, why = self.nvml.sm_mhz(), self.nvml.reasons()
        except Exception:  # a clock is a note beside a timing: never let it fail one
            self.nvml = None
            return
        if mhz is not None:
            self.samples.append((mhz, why))

    def summary(self) -> dict:
        """sm_mhz: the median clock of the samples; power_capped: the share of samples with the power cap on."""
        if not self.samples:
            return {}
        capped = [w is not None and bool(w & SW_POWER_CAP) for _, w in self.samples]
        return {"sm_mhz": statistics.median(m for m, _ in self.samples),
                "power_capped": sum(capped) / len(capped), "clock_samples": len(self.samples)}


_NVML = {}


def nvml_for(device):
    """Nvml.open(device), once per device (None where NVML is unavailable)."""
    key = str(device)
    if key not in _NVML:
        _NVML[key] = Nvml.open(device)
    return _NVML[key]
