#!/bin/sh
# Make BUILD/bundle: gpuperf, its tests, the non-CUDA shared libraries they link
# (jansson, cairo and its dependencies, turbojpeg, OpenBLAS) and a font, so that a GPU
# machine with only the CUDA stack and no package registry can run them:
#   . BUILD/bundle/env.sh && BUILD/bundle/gpuperf info
# CUDA, cuDNN, cuBLAS, NCCL, CUPTI and the C/C++ runtimes come from that machine.
# The MPI transport plugin (libgpuperf_mpi.so, when built) goes beside gpuperf, but not
# MPI itself: the plugin must use the target machine's own Open MPI, the one its
# mpirun starts (libmpi, open-rte, open-pal, hwloc, pmix and their kin are skipped).
set -eu
BUILD=${1:-build}
B="$BUILD/bundle"
rm -rf "$B"
mkdir -p "$B/lib" "$B/fonts"
cp "$BUILD/gpuperf" "$BUILD/gpuperf_tests" "$B/"
[ -f "$BUILD/libgpuperf_mpi.so" ] && cp "$BUILD/libgpuperf_mpi.so" "$B/"
skip='lib(c|m|dl|rt|pthread|resolv|stdc\+\+|gcc_s|cuda|cudart|cudnn[a-z_]*|cublas|cublasLt|nccl|cupti|nvrtc[a-z-]*|nvJitLink|mpi[a-z_]*|open-rte|open-pal|hwloc|pmix|event[a-z_0-9.-]*|ucp|ucs|uct|ucm|fabric|psm2|ibverbs|rdmacm|mca_common[a-z_]*)\.so|ld-linux'
# OpenBLAS is loaded at run time (src/ops/cpu/blas.h), so ldd of the binaries does not
# name it: it goes in as libopenblas.so.0, with what it links (libgfortran, ...)
blas=$(ldconfig -p | awk '$1 == "libopenblas.so.0" {print $NF; exit}')
[ -n "$blas" ] || { echo "bundle: no libopenblas.so.0 (apt-get install libopenblas0)" >&2; exit 1; }
cp -L "$blas" "$B/lib/libopenblas.so.0"
ldd "$BUILD/gpuperf" "$BUILD/gpuperf_tests" "$blas" | awk '/=> \// {print $3}' | sort -u |
	grep -v -E "$skip" | grep -v 'libopenblas' |
	while read -r lib; do cp -L "$lib" "$B/lib/"; done
font=$(fc-match -f '%{file}' sans-serif 2>/dev/null || true)
[ -n "$font" ] && [ -f "$font" ] && cp "$font" "$B/fonts/"
cat > "$B/fonts/fonts.conf" <<CONF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir prefix="relative">.</dir><cachedir>/tmp/gpuperf-fontcache</cachedir></fontconfig>
CONF
cat > "$B/env.sh" <<'ENV'
# Source me: . path/to/bundle/env.sh
_gp_b=$(cd "$(dirname "${BASH_SOURCE:-$0}")" && pwd)
export LD_LIBRARY_PATH="$_gp_b/lib:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FONTCONFIG_FILE="$_gp_b/fonts/fonts.conf"
export GPUPERF_BIN="$_gp_b/gpuperf"
ENV
du -sh "$B" | awk '{print "bundle: " $1 " in '"$B"'"}'
ls "$B/lib" | tr '\n' ' '; echo
