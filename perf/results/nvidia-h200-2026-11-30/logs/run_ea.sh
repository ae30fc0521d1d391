#!/bin/bash
# Fourteenth session: how cuDNN's SDPA decode kernel streams the long shapes where it leads cuda by 1-1.7% (run dz):
# ncu launch statistics, DRAM bytes and throughput of cuDNN's, Triton's and our kernels, B16 S32768 and D=64 B32
# S8192 (every kernel of ncu_probe.py with one warm-up and one timed call; ncu flushes caches between kernels).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__waves_per_multiprocessor,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active"
for shape in 16,1,32,8,32768,128 32,1,32,8,8192,64; do
  for be in sdpa-cudnn triton cuda; do
    f=$OUT/ncu_${be}_${shape//,/_}.csv
    timeout 100 ncu --csv --metrics $M python perf/ncu_probe.py --shape $shape --backend $be --iters 1 > $f 2>/dev/null
    python - "$f" "$be $shape" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
i = {h: n for n, h in enumerate(head)}
k = collections.OrderedDict()
for r in rows:
    k.setdefault((r[i["ID"]], r[i["Kernel Name"]][:70]), {})[r[i["Metric Name"]]] = r[i["Metric Value"]]
print("==", sys.argv[2])
for (kid, name), m in k.items():
    if any(s in name for s in ("distribution", "elementwise", "fill", "copy", "Copy")): continue
    print(kid, name, "|", "; ".join(f"{a.split('__')[1]}={b}" for a, b in m.items()))
PY
  done
done
date -u
