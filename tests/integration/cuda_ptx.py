"""Compile the stochastic transformer's device kernels for a real GPU, on a machine without one.

    python tests/integration/cuda_ptx.py        # one JSON line per kernel; exit 3: no NVVM here

numba-cuda lowers each kernel through NVIDIA's NVVM to PTX for compute capability 9.0 (H100,
H200), with the argument types a launch of `simulate_stochastic_cuda` passes: the launch is
intercepted (`cuda.to_device` keeps the host array, the kernel's launch records its
arguments), and `cuda.compile_ptx` compiles what it would have run. numba-cuda's simulator,
which the other tests use, runs the kernels as Python and accepts what NVVM refuses (a NumPy
function with no device version, an allocation, an unsupported type); this does not.

The one stand-in: numba-cuda asks the current device for its compute capability when it
compiles a device function (`dispatcher.get_current_device`), which needs a driver; the answer
here is 9.0's, the capability the kernels are compiled for. Needs NVVM and NVRTC (the
`nvidia-nvvm` and `nvidia-cuda-nvrtc` wheels, in tokensweep's `integration` extra). Run with
NUMBA_ENABLE_CUDASIM=0 (set here before numba.cuda is imported).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"

import numba  # noqa: E402
import numpy as np  # noqa: E402

CAPABILITY = (9, 0)
# (n, d, layout): the smallest and the largest size class of the thread layout, and the warp
SIZES = [(3, 4, "thread"), (32, 64, "thread"), (32, 64, "warp")]
MISSING = 3  # the exit code where NVVM or NVRTC is not installed


def nvidia_libraries_missing() -> str | None:
    from cuda.pathfinder import DynamicLibNotFoundError, load_nvidia_dynamic_lib

    for lib in ("nvvm", "nvrtc"):
        try:
            load_nvidia_dynamic_lib(lib)
        except DynamicLibNotFoundError:
            return (f"NVIDIA's {lib.upper()} library is not installed: pip install nvidia-nvvm "
                    "nvidia-cuda-nvrtc (tokensweep's integration extra)")
    return None


class _HostArray(np.ndarray):
    """What `cuda.to_device` returns here: the host array, which `_launch` copies back."""

    def copy_to_host(self, host):
        pass


class _Recorder:
    """Stands for a kernel's launch configuration: records the arguments of the launch."""

    def __init__(self, kernel, launches, layout):
        self.kernel, self.launches, self.layout = kernel, launches, layout

    def __getitem__(self, configuration):
        return lambda *args: self.launches.append((self.layout, self.kernel, args))


def record_launches(launches: list) -> None:
    """Make every launch of the device kernels append (layout, kernel, arguments) to `launches`
    instead of running."""
    from numba import cuda

    from tokensweep.kernels.stochastic import cuda_kernel

    thread_kernel, warp_kernel = cuda_kernel.device_kernel, cuda_kernel.warp_kernel
    cuda.to_device = lambda a: np.asarray(a).view(_HostArray)
    cuda_kernel.device_kernel = lambda ncap, dcap: _Recorder(thread_kernel(ncap, dcap), launches,
                                                             f"thread {ncap}x{dcap}")
    cuda_kernel.warp_kernel = lambda: _Recorder(warp_kernel(), launches, "warp")


def launch(n, d, layout) -> None:
    """A `simulate_stochastic_cuda` call that records every observable."""
    from tokensweep.kernels import vocabulary
    from tokensweep.kernels.stochastic.cuda import simulate_stochastic_cuda

    simulate_stochastic_cuda((1, 2), np.arange(4), n=n, d=d, beta=1.0, T=1.0, layers=4,
                             checkpoint_layers=[2, 4], record=vocabulary.RECORD_NAMES, layout=layout)


def main() -> int:
    missing = nvidia_libraries_missing()
    if missing:
        print(missing)
        return MISSING
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda

    class Capability:  # the stand-in (module docstring)
        compute_capability = CAPABILITY

    dispatcher.get_current_device = Capability
    launches = []
    record_launches(launches)
    status = 0
    for n, d, layout in SIZES:
        launch(n, d, layout)
        name, kernel, args = launches[-1]
        types = tuple(numba.typeof(np.asarray(a) if isinstance(a, np.ndarray) else a)
                      for a in args)
        start = time.perf_counter()
        try:
            ptx, _ = cuda.compile_ptx(kernel.py_func, types, cc=CAPABILITY)
            result = {"kernel": name, "n": n, "d": d, "ok": True,
                      "target": next(line.split()[1] for line in ptx.splitlines()
                                     if line.startswith(".target")),
                      "entries": sum(line.startswith(".visible .entry") for line in ptx.splitlines()),
                      "ptx_bytes": len(ptx)}
        except Exception as err:  # what NVVM or numba-cuda's typing refused: the finding
            status = 1
            result = {"kernel": name, "n": n, "d": d, "ok": False,
                      "error": f"{type(err).__name__}: {err}"[:4000]}
        result["seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
