#!/bin/bash
# Nsight Compute stall sampling of one kernel on the GPU host, summarized by bench/ncu_stalls.py.
#   bash bench/ncu_profile.sh NAME KERNEL_REGEX command args...   (writes $OUT/NAME.sass.csv.gz, $OUT/NAME.stalls.txt)
# The third launch of the kernel is profiled (the first two compile and warm up).
set -u
name=$1 kernel=$2; shift 2
out=${OUT:-.}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
"$NCU" --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source yes \
    -k "regex:$kernel" -s 2 -c 1 -f -o "$out/$name" "$@" > "$out/$name.ncu.log" 2>&1 || { tail -5 "$out/$name.ncu.log"; exit 1; }
"$NCU" -i "$out/$name.ncu-rep" --page source --csv --print-source sass | gzip > "$out/$name.sass.csv.gz"
"$NCU" -i "$out/$name.ncu-rep" --page details --csv > "$out/$name.details.csv" 2>&1
rm -f "$out/$name.ncu-rep"
python3 "$(dirname "$0")/ncu_stalls.py" "$out/$name.sass.csv.gz" > "$out/$name.stalls.txt"
cat "$out/$name.stalls.txt"
