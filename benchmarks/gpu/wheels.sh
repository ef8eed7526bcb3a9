#!/usr/bin/env bash
# Wheels the GPU machine lacks (spaCy, thinc, srsly and their needs), for Python 3.12, made small enough
# to travel with the working tree (64 MiB in all): debug symbols stripped, spaCy's own tests dropped.
#   bash benchmarks/gpu/wheels.sh [DIR]     -> DIR/site.tar.xz (default .whl); unpack it into a folder on
#                                             PYTHONPATH there (a wheel unpacked is an installed wheel)
# This package travels as source (PYTHONPATH=repo); a dist-info with its entry points goes in the site,
# so that spaCy finds the `elmo` factory and the architectures from a config as it would installed.
# Versions are this venv's, so the GPU runs the same spaCy stack as CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.whl}
py=${PY:-.venv/bin/python}
names="spacy thinc srsly cymem preshed murmurhash blis catalogue confection wasabi weasel spacy-legacy
spacy-loggers smart_open cloudpathlib pydantic pydantic_core annotated-types typing-inspection"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in $names; do
  version=$($py -m pip show "$name" | sed -n 's/^Version: //p')
  $py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$work/wheels" "$name==$version" 2>&1 | grep -v "is ignored" || true
done
mkdir -p "$work/site"
for wheel in "$work"/wheels/*.whl; do unzip -qo "$wheel" -d "$work/site"; done
rm -rf "$work/site/spacy/tests" "$work/site/thinc/tests" "$work/site/srsly/tests"
find "$work/site" -name "*.so" -exec strip --strip-unneeded {} +
version=$($py -c "import spacy_elmo.about as a; print(a.__version__)")
info="$work/site/spacy_elmo-$version.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: spacy-elmo\nVersion: %s\n' "$version" > "$info/METADATA"
$py - "$info/entry_points.txt" <<'PYEOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
with open(sys.argv[1], "w") as out:
    for group, entries in groups.items():
        out.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n")
PYEOF
mkdir -p "$dir"
(cd "$work/site" && tar -cf - .) | xz -9 -T0 > "$dir/site.tar.xz"
ls -la "$dir/site.tar.xz"
