#!/usr/bin/env bash
# bootstrap — install what inferd needs on Debian 12 and build it.
#   ./tools/bootstrap.sh [extra meson options, e.g. -Dcuda=disabled]
# Installs (as root, or through sudo): meson, ninja, pkg-config, libmicrohttpd,
# jansson, libuv; the build goes to ./build. CUDA is used when nvcc is found
# (PATH or /usr/local/cuda/bin).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(meson ninja-build pkg-config gcc libmicrohttpd-dev libjansson-dev libuv1-dev curl python3)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "bootstrap: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi

if [ -d build ]; then
    meson setup --reconfigure build "$@" >/dev/null
else
    meson setup build "$@" >/dev/null
fi
ninja -C build
echo "bootstrap: built build/daemon/inferd; next: ./tools/demo.sh (serves data/models/stories260K.gguf), ./tools/test.sh"
