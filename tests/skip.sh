#!/bin/sh
# skip — stands in for a test whose data only ../shared has (tests/meson.build):
# one line naming what is missing, exit 77 (meson: skipped).
#   skip.sh FILE...   (paths relative to the data root)
echo "skip: needs $* from ../shared, which is not beside this checkout (data/ has only stories260K and the SPM vocab)"
exit 77
