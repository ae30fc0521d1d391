#!/usr/bin/env bash
# The first run of the sm_100a decode kernel, for whoever first has a Blackwell B200 (compute capability
# 10.0; an sm_100a binary does not run on 10.3). The kernel has only been compiled and disassembled:
# nothing of it has run.
# From the repository root:
#
#   bash tools/first_run_sm100.sh            # everything, logs and a tarball in $OUT
#
# Order: the smallest problems first, each in its own process under `timeout` (a wrong barrier phase
# hangs instead of failing); then the same with the Tensor Memory access-check build; then the
# sanitizers; then the GPU test suite and the perf suite against Triton. Stops at the first failing
# stage and says where; every log goes into $OUT/first-run-sm100.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/fmha-first-run-sm100}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FMHA_CACHE_DIR=${FMHA_CACHE_DIR:-$OUT/cache}
export FMHA_CUDA_SM100=1  # auto takes the kernel, as the test and perf suites expect of the cuda backend
T=${FIRST_RUN_TIMEOUT:-60}

finish() {
  tar -czf "$OUT/first-run-sm100.tar.gz" -C "$OUT" --exclude cache --exclude first-run-sm100.tar.gz . 2>/dev/null
  echo "logs: $OUT/first-run-sm100.tar.gz"
  exit "$1"
}
stage() {  # stage NAME COMMAND...: run with a timeout, log to $OUT/NAME.log; stop on failure
  local name=$1; shift
  echo "== $name"
  timeout "$T" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$OUT/$name.log"
  if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] && echo "TIMEOUT after $T s (a hang: look for a barrier phase or a lost commit)"
    echo "FAILED: $name (exit $rc); log $OUT/$name.log"
    finish 1
  fi
}

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python - <<'EOF' || finish 1
import torch
cap = torch.cuda.get_device_capability()
assert cap == (10, 0), f"compute capability {cap}: this script is for sm_100a (10.0)"
EOF
T=900 stage build python -m fmha.cuda.build --arch sm_100a --force

# One case per process: B, T, Hq, Hkv, S, D (and a page size; "shared": v_cache is k_cache, or its first 512
# columns at D = 576), smallest first.
CASES=(
  "1 1 4 1 64 128"        # one tile (D = 128: 64-key tiles)
  "1 1 4 1 128 128"       # two tiles: S(1) issued before P V(0)
  "1 1 4 1 192 128"       # three: the S buffers' parity wraps
  "1 1 4 1 1000 128"      # a partial last tile (the V tail)
  "1 1 4 1 1000 64"
  "1 1 4 1 1000 256"
  "1 1 16 1 1000 512"
  "2 16 32 8 1000 128"    # T = 16 causal, two row blocks of 64
  "1 1 8 1 32768 128"     # split-KV (the combine kernel)
  "2 1 28 4 1000 128 16"  # paged, 16-token pages (TMA boxes inside a page)
  "2 1 28 4 1000 128 1"   # paged, token-level (the gather)
  "1 1 16 1 1000 512 shared"      # K = V: one ring, P V reads the K stage (LATENT_SPLIT_QK)
  "2 2 64 1 1000 512 64 shared"   # ... two row blocks, 64-token pages
  "1 1 16 1 32768 512 shared"     # ... split-KV
  "2 1 16 1 1000 576 64 shared"   # V = K's first 512 of 576 columns, 64-token pages
  "2 1 16 1 1000 512 13 shared"   # K = V gathered (13-token pages)
)
i=0
for c in "${CASES[@]}"; do
  i=$((i + 1))
  stage "case$i" python - $c <<'EOF'
import sys, torch, fmha
args = sys.argv[1:]
shared = args[-1] == "shared"
B, T, Hq, Hkv, S, D, *page = (int(x) for x in args[:len(args) - shared])
torch.manual_seed(0)
dev = "cuda"
q = torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, S, Hkv, D, device=dev, dtype=torch.bfloat16)
v = k[..., :512] if shared else torch.randn_like(k)  # (k itself below 576)
lens = torch.full((B,), S, dtype=torch.int32, device=dev)
lens[-1] = max(1, S - 7)
kw = {}
if page:
    P = page[0]
    nb = (S + P - 1) // P
    perm = torch.randperm(B * nb, device=dev)
    kp = torch.zeros(B * nb, P, Hkv, D, device=dev, dtype=k.dtype)
    vp = torch.zeros(B * nb, P, Hkv, v.shape[-1], device=dev, dtype=k.dtype)
    pad = nb * P - S
    kf = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).reshape(B * nb, P, Hkv, D)
    vf = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).reshape(B * nb, P, Hkv, v.shape[-1])
    kp[perm] = kf
    vp[perm] = vf
    vp = kp[..., :512] if shared else vp
    kw = {"block_table": perm.view(B, nb).int()}
    kk, vv = kp, vp
else:
    kk, vv = k, v
print(fmha.explain(q, kk, vv, lens, backend="cuda", **kw))
out, lse = fmha.attention(q, kk, vv, lens, backend="cuda", return_lse=True, **kw)
torch.cuda.synchronize()
ref, ref_lse = fmha.attention(q, kk, vv, lens, backend="reference", return_lse=True, **kw)
err = (out.float() - ref.float()).abs().max().item()
lerr = (lse - ref_lse).abs().max().item()
print(f"B={B} T={T} Hq={Hq} Hkv={Hkv} S={S} D={D} page={page} shared={shared}: max |out - ref| {err:.3e}, |lse - ref| {lerr:.3e}")
assert err < 2e-2 and lerr < 1e-3, "WRONG"
EOF
done

# The same first cases with ptxas's Tensor Memory access checks compiled in (traps on a wrong lane
# quarter, unallocated columns, a bad lane offset).
export FMHA_NVCC_FLAGS="-Xptxas -g-tmem-access-check"
T=900 stage build_tmem_check python -m fmha.cuda.build --arch sm_100a
T=300 stage selftest_tmem_check python -m fmha.cuda.selftest
unset FMHA_NVCC_FLAGS

T=300 stage selftest python -m fmha.cuda.selftest
for tool in memcheck racecheck synccheck; do
  T=900 stage "$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 python tests/sanitize_subset.py
done
T=3600 stage pytest python -m pytest -q -x tests/ -rs
T=3600 stage perf python -m perf --preset full --contenders cuda,triton,sdpa-cudnn
echo "first run complete"
finish 0
