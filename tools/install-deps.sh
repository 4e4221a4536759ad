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
	libturbojpeg0-dev libjpeg-dev zlib1g-dev fonts-dejavu-core python3 python3-pip clang \
	libopenmpi-dev openmpi-bin >/dev/null
# libFuzzer's runtime for `make fuzz`: a package of its own in newer LLVM packaging
# (Debian 12, Ubuntu 24.04); older releases ship it in libclang-common, which clang
# already pulls in.
# Headless Chromium renders bench's report.html in a test (which skips without it).
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null || \
	echo "note: could not install chromium; the report's browser test will skip"
if apt-cache show libclang-rt-dev >/dev/null 2>&1; then
	$SUDO apt-get install -y -qq --no-install-recommends libclang-rt-dev >/dev/null
fi
# Python packages for the interoperability tests (they skip without them): safetensors
# reads our checkpoints, tensorboard our event files (torch-tb-profiler, its PyTorch
# Profiler tab, our traces, without torch), Holistic Trace Analysis our
# traces (it needs psutil without declaring it, and fails on pandas 3 for some traces).
PIP="python3 -m pip install -q --disable-pip-version-check"
PKGS="safetensors numpy tensorboard torch-tb-profiler HolisticTraceAnalysis psutil pandas<3"
# shellcheck disable=SC2086
$PIP $PKGS 2>/dev/null || $PIP --break-system-packages $PKGS || \
	echo "note: could not install the Python test packages; their tests will skip"
