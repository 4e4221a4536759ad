# gpuperf build. The CPU engine is always built; the CUDA backend is added when nvcc
# and cuDNN are found (CUDA=0 turns it off, CUDA=1 insists on it).
#   make            build/gpuperf
#   make test       build and run the unit tests (GPU tests skip without a GPU)
#   make test-san   the same under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only)
#   make check      test + test-san: what CI runs
#   make fuzz       build-fuzz/: libFuzzer targets for the file and option parsers, each
#                   run FUZZ_SECONDS (60) seconds; fails when one finds a crash
#   make fuzz-ci    the same for 10 seconds each: the short pass CI runs
#   make bundle     build/bundle/: the binary and its non-CUDA shared libraries, for a
#                   GPU machine without a package registry
# The MPI transport is a plugin, build/libgpuperf_mpi.so, built with mpicc when it is
# found (MPI=0 leaves it out, MPI=1 insists); gpuperf loads it only under mpirun.

BUILD ?= build
SAN ?= 0
FUZZ ?= 0
CUDA ?= auto
MPI ?= auto
MPICC ?= mpicc
CC ?= cc
ARCH ?= sm_90

CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda /usr/local/cuda-13.0 /usr/lib/cuda))
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDNN_H := $(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h /usr/include/cudnn.h /usr/include/x86_64-linux-gnu/cudnn.h))

ifeq ($(CUDA),auto)
  ifneq ($(and $(NVCC),$(CUDNN_H)),)
    WITH_CUDA := 1
  else
    WITH_CUDA := 0
  endif
else
  WITH_CUDA := $(CUDA)
endif
ifneq ($(SAN)$(FUZZ),00)
  WITH_CUDA := 0
endif
ifeq ($(MPI),auto)
  WITH_MPI := $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)
else
  WITH_MPI := $(MPI)
endif
ifneq ($(FUZZ),0)
  WITH_MPI := 0
endif

# OpenBLAS: its header only; the library is loaded at run time (src/ops/cpu/blas.h)
PKGS := jansson cairo libturbojpeg libjpeg zlib
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) openblas)
PKG_LIBS := $(shell pkg-config --libs $(PKGS))

CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
	  -Wno-missing-field-initializers \
	  -Isrc -MMD -MP -pthread $(PKG_CFLAGS)
LDLIBS += $(PKG_LIBS) -lm -ldl -pthread
NVCCFLAGS ?= -O3 -arch=$(ARCH) -std=c++17 -Isrc -Xcompiler -Wall,-Wno-unused-parameter -Werror all-warnings

ifeq ($(SAN),1)
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=address,undefined
endif
# The library is instrumented for coverage without libFuzzer's main; only the fuzz
# targets link the fuzzer itself.
ifeq ($(FUZZ),1)
  CFLAGS += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
	    -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=fuzzer,address,undefined
endif

MPI_PLUGIN_SRC := src/dist/mpi_plugin.c
SRC_C := $(filter-out $(MPI_PLUGIN_SRC),$(shell find src -name '*.c' -not -path '*/cuda/*' | sort))
CUDA_C := $(shell find src -path '*/cuda/*' -name '*.c' | sort)
CUDA_CU := $(shell find src -name '*.cu' | sort)
TEST_C := $(shell find tests -maxdepth 1 -name '*.c' | sort)
GPU_TEST_C := $(shell find tests/gpu -name '*.c' 2>/dev/null | sort)

ifeq ($(WITH_CUDA),1)
  CFLAGS += -DGP_HAVE_CUDA -I$(CUDA_HOME)/include
  LIB_SRC := $(SRC_C) $(CUDA_C)
  LIB_OBJ_CU := $(CUDA_CU:%.cu=$(BUILD)/%.o)
  TEST_SRC := $(TEST_C) $(GPU_TEST_C)
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas \
	    -lcupti -lnccl -lcudart -lstdc++
else
  LIB_SRC := $(SRC_C)
  LIB_OBJ_CU :=
  TEST_SRC := $(TEST_C)
endif

MAIN_SRC := src/cmd/main.c
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out $(MAIN_SRC),$(LIB_SRC))) $(LIB_OBJ_CU)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test test-san check clean bundle run fuzz fuzz-ci fuzz-build fusion-bench stem-probe gemm-probe
ifeq ($(WITH_MPI),1)
  MPI_PLUGIN := $(BUILD)/libgpuperf_mpi.so
endif
all: $(BUILD)/gpuperf $(BUILD)/gpuperf_tests $(MPI_PLUGIN)

# Only the plugin sees mpi.h and links libmpi; its sanitizer flags follow the build's.
$(BUILD)/libgpuperf_mpi.so: $(MPI_PLUGIN_SRC) src/dist/mpi_plugin.h
	@mkdir -p $(@D)
	@echo "  MPICC   $@"
	@$(MPICC) -shared -fPIC -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Isrc \
		$(filter -fsanitize=%,$(CFLAGS)) -o $@ $(MPI_PLUGIN_SRC)

$(BUILD)/libgpuperf.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  AR      $@"
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/gpuperf: $(BUILD)/src/cmd/main.o $(BUILD)/libgpuperf.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/gpuperf_tests: $(TEST_OBJ) $(BUILD)/libgpuperf.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The commit a bench report names: the object that records it is rebuilt when the
# commit (or whether the tree is dirty) changes.
GIT_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
COMMIT_STAMP := $(BUILD)/commit.txt
$(shell mkdir -p $(BUILD); [ "`cat $(COMMIT_STAMP) 2>/dev/null`" = "$(GIT_COMMIT)" ] || \
	echo "$(GIT_COMMIT)" > $(COMMIT_STAMP))
$(BUILD)/src/cmd/cmd_bench.o: $(COMMIT_STAMP)
$(BUILD)/src/cmd/cmd_bench.o: CFLAGS += -DGPUPERF_COMMIT='"$(GIT_COMMIT)"'

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	@$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

# Benchmark programs (llm.c's dev/cuda/): one comparison of kernel paths each, outside
# the product and outside `all`. fusion_bench: cuDNN's runtime fusion (backend API)
# against separate convolution and batch-norm kernels (docs/dev/fusion.md).
FUSION_BENCH_OBJ := $(BUILD)/tools/dev/fusion_bench.o $(BUILD)/tools/dev/fusion_graph.o \
		    $(BUILD)/tools/dev/fusion_kernels.o
fusion-bench: $(BUILD)/fusion_bench
$(BUILD)/fusion_bench: $(FUSION_BENCH_OBJ)
ifneq ($(WITH_CUDA),1)
	$(error fusion-bench needs nvcc and cuDNN (CUDA_HOME=$(CUDA_HOME)))
endif
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcudart \
		-lstdc++ -lm

# stem_probe: ResNet's stem convolution through cuDNN's legacy API with 3, 4 and 8 input
# channels, every algorithm FindEx times (docs/dev/stem.md).
stem-probe: $(BUILD)/stem_probe
$(BUILD)/stem_probe: tools/dev/stem_probe.c
ifneq ($(WITH_CUDA),1)
	$(error stem-probe needs nvcc and cuDNN (CUDA_HOME=$(CUDA_HOME)))
endif
	@mkdir -p $(BUILD)
	@echo "  CC      $@"
	@$(CC) -O2 -std=c11 -Wall -Wextra -Werror -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 \
		-Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcudart

# gemm_probe: ResNet-50's 1x1 products through cublasGemmEx's pick and every cuBLASLt
# heuristic candidate.
gemm-probe: $(BUILD)/gemm_probe
$(BUILD)/gemm_probe: tools/dev/gemm_probe.c
ifneq ($(WITH_CUDA),1)
	$(error gemm-probe needs nvcc and cuBLAS (CUDA_HOME=$(CUDA_HOME)))
endif
	@mkdir -p $(BUILD)
	@echo "  CC      $@"
	@$(CC) -O2 -std=c11 -Wall -Wextra -Werror -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 \
		-Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart

test: $(BUILD)/gpuperf $(BUILD)/gpuperf_tests $(MPI_PLUGIN)
	GPUPERF_BIN=$(BUILD)/gpuperf ./$(BUILD)/gpuperf_tests

test-san:
	$(MAKE) BUILD=build-san SAN=1 test

check: test test-san

# Fuzzing: clang's libFuzzer over the parsers of files and options users hand in.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(sort $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.c))))

$(BUILD)/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/libgpuperf.a
	@echo "  LD      $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

.SECONDARY: $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/%.o)

fuzz-build:
	$(MAKE) BUILD=build-fuzz FUZZ=1 CC=$(FUZZ_CC) $(FUZZ_TARGETS:%=build-fuzz/%)

fuzz: fuzz-build
	sh tools/fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=10

run: $(BUILD)/gpuperf
	./$(BUILD)/gpuperf info --model resnet50
	./$(BUILD)/gpuperf train --model simple_cnn --device cpu --batch 32 --size 32 --steps 30

bundle: $(BUILD)/gpuperf $(BUILD)/gpuperf_tests $(MPI_PLUGIN)
	sh tools/bundle.sh $(BUILD)

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/src/cmd/main.d $(FUSION_BENCH_OBJ:.o=.d) \
	 $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/%.d)
