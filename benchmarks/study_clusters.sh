#!/usr/bin/env bash
# Grow the study's pinned cluster assignments (benchmarks/results/study/clusters.parquet) part by part:
# each part embeds only the windows the committed file lacks, assigns them to its centroids and writes the
# grown file back (cluster.pin). Parts are small (~12k windows, ~26 min on a 2-core AVX2 machine) so that a
# session that ends mid-part loses little; commit the file after each. Give the parts still to do, e.g.
#   nohup nice -n 19 benchmarks/study_clusters.sh 0.3 0.4 0.5 legal > logs/study-clusters.log 2>&1 &
# A number is a generic embed.fraction; a domain name adds that domain's train split (after fraction 1.0).
set -euo pipefail
cd "$(dirname "$0")/.."
SLM="${SLM:-.venv/bin/slm}"
pinned=benchmarks/results/study/clusters.parquet
domains=""
for part in "$@"; do
  if [[ "$part" =~ ^[0-9.]+$ ]]; then
    extra=(embed.fraction="$part" 'embed.splits=[all]')
  else
    domains="${domains:+$domains,}$part"
    extra=(embed.fraction=1 'embed.splits=[all,train]' "embed.domains=[$domains]")
  fi
  echo "=== part $part: $(date -u +%FT%TZ)"
  start=$(date +%s)
  "$SLM" run jobs/study/clusters.yaml 'stages=[corpus,cluster]' cluster.assignments="$pinned" \
    cluster.max_unpinned=1 "${extra[@]}"
  echo "=== part $part done in $(( $(date +%s) - start )) s: $(date -u +%FT%TZ)"
done
