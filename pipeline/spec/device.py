"""The spec field `device: cpu | cuda`: where a model's kernel runs (docs/models.md 4.6).

The device's random numbers are not the CPU's (Philox blocks on the device, PCG64 Generators on
the CPU), so `device` is part of what a spec computes: a store made with one refuses a spec with
the other (the spec comparison sees the field), and a cube never mixes the two streams. The
default, cpu, is left out of the spec's plain data, so every spec stored before the field
existed, and every cpu spec since, reads and compares exactly as before (no stored bit changes).
No numba here: whether a GPU (or numba-cuda's simulator) is present is the pre-run check's
question (`pipeline/prepare.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_serializer, model_validator

from .base import SweepBase, refuse

DEVICES = ("cpu", "cuda")
MAX_DEVICE_TOKENS = 32  # = kernels.stochastic.cuda.MAX_TOKENS (no numba imported here)
MAX_DEVICE_DIM = 64  # = kernels.stochastic.cuda.MAX_DIM


class DeviceSweep(SweepBase):
    """A sweep whose model also has a device kernel: `device: cuda` selects it."""

    device: Literal[DEVICES] = "cpu"

    @model_serializer(mode="wrap")
    def _cpu_left_out(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("device") == "cpu":
            data.pop("device")
        return data

    @model_validator(mode="after")
    def _device_sizes(self):
        if self.device == "cuda":
            big = [v for v in self.axes["n"] if not 1 <= v <= MAX_DEVICE_TOKENS]
            if big:
                raise refuse("device", f"'cuda' runs n from 1 to {MAX_DEVICE_TOKENS}, the grid has "
                             f"n = {big}: use device: cpu or smaller n")
            big = [v for v in self.axes["d"] if not 2 <= v <= MAX_DEVICE_DIM]
            if big:
                raise refuse("device", f"'cuda' runs d from 2 to {MAX_DEVICE_DIM}, the grid has "
                             f"d = {big}: use device: cpu or smaller d")
        return self


def refuse_on_device(sweep: DeviceSweep, unsupported: dict) -> None:
    """With device: cuda, refuse each option {field: why} that the device kernel lacks."""
    if sweep.device != "cuda":
        return
    for field, why in unsupported.items():
        if why:
            raise refuse(field, f"{why} runs on the CPU only: set device: cpu (or leave "
                         f"{field} at its default)")
