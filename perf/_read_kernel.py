"""A Triton kernel that only reads: the read-bandwidth ceiling of `timing.measure_ceilings`.

Imported lazily, after `bench` has decided whether the Triton interpreter is on
(TRITON_INTERPRET is read when a kernel is defined). Each program walks tiles
pid, pid + nprog, ... of a flat bf16 tensor, sums them in fp32 and writes one
partial sum, so the kernel writes a few KB while reading the whole tensor.
"""
import triton
import triton.language as tl


@triton.jit
def read_sum_kernel(X, Partial, n_tiles, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # int64 loop: offsets of tensors over 2^31 elements
    nprog = tl.num_programs(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for tile in range(pid, n_tiles, nprog):
        offs = tile * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(X + offs).to(tl.float32)
    tl.store(Partial + pid, tl.sum(acc, axis=0))
