"""fmha's hand-written CUDA kernels: the sm_90a (Hopper) TMA + WGMMA decode kernel.

The sources live in `csrc/`; `loader.load()` compiles them once with nvcc into
a cache directory and loads the shared library with ctypes (no ATen extension).
`python -m fmha.cuda.build --arch sm_90a` builds ahead of time, without a GPU.
"""
