#!/bin/bash
# D=512 Hq=128 once more with every round printed, GPU power and clocks logged beside it (smi.csv);
# then ncu kernel durations of the split-KV shapes (decode kernel vs combine kernel).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache47
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 200 > $OUT/smi.csv &
SMI=$!
date -u
V="--no-peers --per-round --variant head= --variant v2=-DFMHA_SM90_D512_V_STAGES=2 --variant qr0=-DFMHA_SM90_D512_Q_REGS=0"
timeout 120 python -W ignore perf/variants.py --sustained --settle-ms 500 --rounds 7 --only 10 $V 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 120 python -W ignore perf/variants.py --rounds 7 --only 10 $V 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 30 python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --clocks --seconds 3
kill $SMI
for s in "8,16,32,8,8192,128 --causal" "1,1,32,8,65536,128" "32,4,32,8,4096,128 --causal"; do
  echo "== $s"
  timeout 100 ncu --clock-control none -k regex:"decode|combine" --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
    python perf/ncu_probe.py --shape $s --iters 2 2>&1 | grep -E "decode|combine|duration|dram__|lts__|sm__thr" | tail -16
done
date -u
