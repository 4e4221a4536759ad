#!/usr/bin/env bash
# Install what gpuperf needs to build and test on Debian/Ubuntu (as root, or with sudo).
# The CUDA toolkit with cuDNN is optional: without it the CPU engine alone is built.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
	build-essential pkg-config libjansson-dev libopenblas-dev libcairo2-dev \
	libturbojpeg0-dev fonts-dejavu-core python3 python3-pip >/dev/null
# Python packages for the interoperability tests (they skip without them).
PIP="python3 -m pip install -q --disable-pip-version-check"
$PIP safetensors numpy 2>/dev/null || $PIP --break-system-packages safetensors numpy || \
	echo "note: could not install safetensors/numpy; their tests will skip"
