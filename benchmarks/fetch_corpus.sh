#!/usr/bin/env bash
# Build a benchmark corpus from a Debian documentation package.
#
#   benchmarks/fetch_corpus.sh PKG DEST_DIR
#   e.g. benchmarks/fetch_corpus.sh python3.11-doc /tmp/pycorpus
#
# Downloads PKG with `apt-get download` (runs `apt-get update` only if that
# fails), unpacks it with `dpkg -x` and copies its documentation sources into
# DEST_DIR, keeping relative paths:
#   - Sphinx packages (e.g. python3.11-doc): the reStructuredText sources,
#     html/_sources/**/*.txt, relative to _sources/;
#   - other packages: *.md *.rst *.txt *.html *.pdf (also .gz, unpacked)
#     under usr/share/doc/, relative to it.
# Idempotent: does nothing when DEST_DIR already contains files.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 PKG DEST_DIR" >&2; exit 2; }
pkg=$1 dest=$2

if [ -d "$dest" ] && [ -n "$(find "$dest" -type f -print -quit)" ]; then
  echo "$dest already has files; skipping"; exit 0
fi

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)  # absolute before we cd away
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
apt-get download "$pkg" || { apt-get update; apt-get download "$pkg"; }
dpkg -x ./*.deb root

src=$(find root -type d -path '*/html/_sources' -print -quit)
if [ -n "$src" ]; then
  cd "$src"; find . -type f -name '*.txt' -print0 | xargs -0r cp --parents -t "$dest"
else
  cd root/usr/share/doc
  find . -type f \( -name '*.md' -o -name '*.rst' -o -name '*.txt' -o -name '*.html' -o -name '*.pdf' \
    -o -name '*.md.gz' -o -name '*.rst.gz' -o -name '*.txt.gz' -o -name '*.pdf.gz' \) -print0 \
    | xargs -0r cp --parents -t "$dest"
  find "$dest" -name '*.gz' -exec gunzip -f {} +
fi

echo "$pkg: $(find "$dest" -type f | wc -l) files, $(du -sh "$dest" | cut -f1) in $dest"
