#!/bin/sh
# data_sync — every file of data/ (the bare-clone data root) equals its copy
# in ../shared byte for byte (the files in its subdirectories: its own
# README.md, meson.build and .gitattributes are not data).
#   data_sync.sh DATA_DIR SHARED_DIR
set -u
data=$1 n=0 bad=0
shared=$(cd "$2" && pwd) || exit 1
cd "$data" || exit 1
for f in $(find . -mindepth 2 -type f | sort); do
    n=$((n + 1))
    if ! cmp -s "$f" "$shared/$f"; then
        echo "FAIL data/${f#./} differs from (or is missing in) $shared/${f#./}"
        bad=$((bad + 1))
    fi
done
echo "$n files compared, $bad differ"
[ "$n" -gt 0 ] && [ "$bad" -eq 0 ]
