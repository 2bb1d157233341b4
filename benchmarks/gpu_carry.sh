#!/usr/bin/env bash
# What benchmarks/gpu.py needs on a lent GPU machine that its image lacks (Ray 2.60, DeepSpeed 0.19.8 and
# their pure-Python needs), as one xz tarball for Python 3.12 under .whl/ (git-ignored), small enough for
# the 64 MiB that travels: Ray's Java jars, dashboard front end, RLlib, Serve and LLM packages are left out.
# Then, through the device tool (carry [".whl"]):
#   mkdir -p /tmp/site && tar -xJf .whl/site312.tar.xz -C /tmp/site &&
#   PYTHONPATH=/tmp/site:$PWD/platform PYTHONUNBUFFERED=1 python3 benchmarks/gpu.py --out $OUT/gpu.json
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$(mktemp -d) site=$(mktemp -d)
trap 'rm -rf "$wheels" "$site"' EXIT
platforms=()
for p in manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34; do
  platforms+=(--platform "${p}_x86_64")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$wheels" ray==2.60.0 colorful==0.5.8 dill==0.4.1 pydantic==2.14.4 pydantic_core==2.50.5 jsonschema==4.26.0 \
  referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1 annotated-types==0.8.0 \
  typing-inspection==0.4.5 tensorboardX==2.6.5 hjson==3.1.0
python3 -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w "$wheels"  # an sdist: built here
python3 - "$wheels" "$site" <<'PY'
import os, sys, zipfile, pathlib
wheels, site = sys.argv[1:]
for wheel in pathlib.Path(wheels).glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            path = z.extract(info, site)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)  # Ray's raylet and gcs_server must stay executable
PY
rm -rf "$site"/ray/{jars,rllib,serve,llm} "$site"/ray/dashboard/client/build
mkdir -p .whl
tar -c -C "$site" . | xz -6 -T0 > .whl/site312.tar.xz.tmp && mv .whl/site312.tar.xz.tmp .whl/site312.tar.xz
ls -l .whl/site312.tar.xz
