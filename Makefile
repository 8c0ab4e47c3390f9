# depthdec — `make` builds the library (static + shared) and the CLI (needs jansson, not cmocka); `make tests` builds
# the test programs (needs cmocka), `make test` builds and runs them.
# CUDA is opt-in: `make CUDA=1 CUDA_ARCH=sm_90`. `make install PREFIX=/usr/local` (DESTDIR honoured) installs the
# header, both libraries, depthdec.pc and the CLI.

CC       ?= gcc
CFLAGS   ?= -O2 -g
# The flags the code needs are appended even when CFLAGS is given on the command line (make CFLAGS=-O1 ...).
override CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -pthread -ffp-contract=off \
            -Iinclude -Isrc
LDLIBS   += -ljansson -lm -pthread
override CFLAGS += -DDD_WITH_CPU=1
BUILD    ?= build
VERSION  := $(shell sed -n 's/^\#define DD_VERSION_STRING "\(.*\)"/\1/p' include/depthdec.h)
# ABI version of libdepthdec.so (its SONAME libdepthdec.so.$(SOVERSION)): bump it when a function of
# include/depthdec.h or a public struct changes incompatibly.
SOVERSION := 1
SONAME   := libdepthdec.so.$(SOVERSION)
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

# src/: the library's core (frame plan, registry, ref backend, sampling, decoder); src/model/: the model and its
# loaders (safetensors container, native and HF configs, export, synthetic models, quantization); src/cpu/: the cpu backend;
# src/cuda/: the cuda backend (CUDA=1 below).
LIB_HDR  := $(wildcard src/*.h src/model/*.h src/cpu/*.h)
LIB_SRC  := $(wildcard src/*.c src/model/*.c src/cpu/*.c)
LIB_OBJ  := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/%)
TEST_COMMON_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_COMMON_OBJ := $(TEST_COMMON_SRC:tests/%.c=$(BUILD)/tobj/%.o)
# .npy I/O belongs to the tools, not the library: linked into the CLI, the tests and the fuzzers.
NPY_OBJ  := $(BUILD)/tools/npy.o

ifeq ($(CUDA),1)
NVCC      ?= nvcc
CUDA_ARCH ?= sm_90
CUDA_HOME ?= /usr/local/cuda
CU_SRC    := $(wildcard src/cuda/*.cu)
CU_OBJ    := $(CU_SRC:src/cuda/%.cu=$(BUILD)/cuobj/%.o)
LIB_OBJ   += $(CU_OBJ)
override CFLAGS += -DDD_WITH_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart -lstdc++
NVFLAGS   ?= -O3 -arch=$(CUDA_ARCH) -Xcompiler -fPIC -Iinclude -Isrc -fmad=false --std=c++17
# The throughput executor's wgmma and tensor copies need the arch-specific Hopper target: its file is built for
# sm_90a instead of sm_90 (on other targets its kernels are empty and the backend runs without it: src/cuda/tput.cu).
comma := ,
$(BUILD)/cuobj/tput.o: NVFLAGS := $(subst -arch=sm_90 ,-gencode=arch=compute_90a$(comma)code=sm_90a ,$(NVFLAGS))
endif

# CPU backend kernels, one file per instruction set (picked at run time from CPUID): only these get ISA flags.
$(BUILD)/obj/cpu/cpu_kern_avx2.o: override CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/obj/cpu/cpu_kern_avx512.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c

# examples/: programs over the public API only (header + library), built by `make` and run by tests/test_examples.c;
# device_api.c calls the CUDA runtime itself: built with CUDA=1 only.
EXAMPLE_SRC := $(wildcard examples/*.c)
ifneq ($(CUDA),1)
EXAMPLE_SRC := $(filter-out examples/device_api.c,$(EXAMPLE_SRC))
endif
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRC))

.PHONY: all lib tests test clean install deps-lib deps-test
all: lib $(BUILD)/depthdec $(EXAMPLES)
lib: $(BUILD)/libdepthdec.a $(BUILD)/libdepthdec.so $(BUILD)/depthdec.pc
tests: all $(TESTS)

# Dependencies, checked before anything compiles, so that a missing one is named with its Debian package instead
# of a compiler's "jansson.h: No such file or directory". Order-only prerequisites: they never force a rebuild.
# $(call need_header,HEADER,NAME,DEBIAN_PACKAGE): preprocess a file that includes HEADER (after the headers
# cmocka.h assumes), or stop with the package to install.
HASH := \#
need_header = printf '$(HASH)include <stdarg.h>\n$(HASH)include <stddef.h>\n$(HASH)include <stdint.h>\n$(HASH)include <setjmp.h>\n$(HASH)include <$(1)>\n' \
    | $(CC) $(filter-out -I%,$(CFLAGS)) $(CPPFLAGS) -E -x c - >/dev/null 2>&1 || { \
    echo "depthdec: $(2) not found ($(1) does not compile with $(CC)): install it (Debian/Ubuntu: apt-get install $(3)," \
         "or run scripts/deps.sh)" >&2; exit 1; }
deps-lib:
	@$(call need_header,jansson.h,jansson,libjansson-dev)
deps-test:
	@$(call need_header,cmocka.h,cmocka,libcmocka-dev)
$(LIB_OBJ) $(NPY_OBJ) $(BUILD)/depthdec: | deps-lib
$(TEST_COMMON_OBJ) $(TESTS): | deps-test

# Library objects are compiled with hidden visibility: libdepthdec.so exports only the functions that
# include/depthdec.h marks DD_API. Tests, the CLI and the Python package link the static archive, where the
# internal functions stay reachable.
$(BUILD)/obj/%.o: src/%.c $(LIB_HDR) include/depthdec.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fvisibility=hidden -c $< -o $@

$(BUILD)/cuobj/%.o: src/cuda/%.cu $(wildcard src/*.h src/model/*.h src/cuda/*.cuh) include/depthdec.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Xcompiler -fvisibility=hidden -c $< -o $@

$(BUILD)/libdepthdec.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/$(SONAME): $(LIB_OBJ) src/depthdec.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/depthdec.map -o $@ $(LIB_OBJ) $(LDFLAGS) $(LDLIBS)

$(BUILD)/libdepthdec.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# pkg-config file; `make install` writes it again with the install's PREFIX.
define PC_FILE
prefix=$(PREFIX)
libdir=$(LIBDIR)
includedir=$(INCLUDEDIR)

Name: depthdec
Description: exact, fast inference for the depth decoder of RVQ speech LMs
Version: $(VERSION)
Cflags: -I$${includedir}
Libs: -L$${libdir} -ldepthdec
Libs.private: $(LDFLAGS) $(LDLIBS)
endef
export PC_FILE

$(BUILD)/depthdec.pc: Makefile include/depthdec.h
	@mkdir -p $(dir $@)
	echo "$$PC_FILE" >$@

$(BUILD)/tools/%.o: tools/%.c tools/npy.h $(LIB_HDR) include/depthdec.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/depthdec: tools/depthdec.c $(NPY_OBJ) $(BUILD)/libdepthdec.a
	$(CC) $(CFLAGS) -o $@ $< $(NPY_OBJ) $(BUILD)/libdepthdec.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c include/depthdec.h $(BUILD)/libdepthdec.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdepthdec.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tobj/%.o: tests/%.c $(wildcard tests/*.h) $(LIB_HDR) include/depthdec.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Itools -c $< -o $@
# the shared test objects (tests/harness.c ...) are kept, not deleted as intermediates after each link
.SECONDARY: $(TEST_COMMON_OBJ)

# Tests that run the CLI find it through DD_CLI (the binary of the same build).
$(BUILD)/test_%: tests/test_%.c $(TEST_COMMON_OBJ) $(NPY_OBJ) $(BUILD)/libdepthdec.a $(BUILD)/depthdec \
                 $(wildcard tests/*.h tools/*.h)
	$(CC) $(CFLAGS) -Itests -Itools -DDD_CLI='"$(BUILD)/depthdec"' -o $@ $< $(TEST_COMMON_OBJ) $(NPY_OBJ) \
	    $(BUILD)/libdepthdec.a $(LDFLAGS) $(LDLIBS) -lcmocka

# Each test binary runs from the repository root; cmocka prints a summary per binary, this prints the total.
# tests/test_install.sh installs into a temporary PREFIX and builds examples/decode.c against it with pkg-config.
test: tests
	@CC="$(CC)" DD_BUILD=$(BUILD) bash tests/run_all.sh $(BUILD) $(TESTS) tests/test_install.sh

clean:
	rm -rf $(BUILD)

install: lib $(BUILD)/depthdec
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/depthdec.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(BUILD)/libdepthdec.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/$(SONAME) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdepthdec.so
	install -m 755 $(BUILD)/depthdec $(DESTDIR)$(BINDIR)/
	echo "$$PC_FILE" >$(DESTDIR)$(PKGCONFIGDIR)/depthdec.pc

# ---- fuzzing (fuzz/): libFuzzer harnesses, clang -fsanitize=fuzzer,address,undefined. The library is rebuilt into
# $(FUZZ_BUILD) with the same sanitizers plus fuzzer coverage; `scripts/sanitize.sh` runs the harnesses.
#   make fuzz && build-fuzz/fuzz_model -max_total_time=60 fuzz/corpus/fuzz_model
FUZZ_CC    ?= clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZERS    := $(FUZZ_BUILD)/fuzz_model $(FUZZ_BUILD)/fuzz_npy
.PHONY: fuzz
fuzz:
	CFLAGS="-O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link" LDFLAGS="$(FUZZ_SAN)" \
	    $(MAKE) CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) $(FUZZ_BUILD)/libdepthdec.a
	for f in $(FUZZERS); do \
	    $(FUZZ_CC) -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc -Itools \
	        -o $$f fuzz/$${f##*/}.c tools/npy.c $(FUZZ_BUILD)/libdepthdec.a -ljansson -lm -pthread || exit 1; \
	done
# tests/test_fuzz_regress.c replays fuzz/regressions/ through the harnesses it includes
$(BUILD)/test_fuzz_regress: $(wildcard fuzz/*.c fuzz/*.h)
