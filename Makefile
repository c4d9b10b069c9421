# accel: convenience targets around meson.  `make demo` and `make test` work
# on a fresh Debian machine: they install missing packages first.
BUILD ?= build
MESON_OPTS ?=
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps setup build demo test test-asan fuzz clean plots

all: build

deps:
	@./tools/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

setup: deps $(BUILD)/build.ninja

build: setup
	ninja -C $(BUILD)

demo: build
	@./tools/demo.sh $(BUILD)

test: build
	meson test -C $(BUILD) --print-errorlogs --num-processes 2 --timeout-multiplier 2

# The charts of docs/benchmarks.md from bench/results/*.jsonl (docs/img/*.svg).
plots:
	/usr/bin/python3 bench/plot.py

# AddressSanitizer + UBSan in a separate build directory.
test-asan: deps
	[ -f $(BUILD)-asan/build.ninja ] || meson setup $(BUILD)-asan -Db_sanitize=address,undefined -Db_lundef=false $(MESON_OPTS)
	ninja -C $(BUILD)-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(BUILD)-asan --print-errorlogs --num-processes 2 --timeout-multiplier 4

# libFuzzer on each fuzz target (tests/fuzz), FUZZ_SECONDS each, with clang
# in a separate build directory; new inputs go to $(BUILD)-fuzz/corpus and
# crashing ones to $(BUILD)-fuzz/crash-* (docs/testing.md).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = config safetensors store manifest import tokens elf
fuzz:
	@./tools/install-deps.sh clang libclang-rt-dev
	[ -f $(BUILD)-fuzz/build.ninja ] || CC=clang meson setup $(BUILD)-fuzz -Dfuzz=enabled $(MESON_OPTS)
	ninja -C $(BUILD)-fuzz $(foreach t,$(FUZZ_TARGETS),tests/fuzz/fuzz-$(t)-libfuzzer)
	set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)-fuzz/corpus/$$t; \
	  dict=tests/fuzz/$$t.dict; [ -f $$dict ] && dict="-dict=$$dict" || dict=; \
	  $(BUILD)-fuzz/tests/fuzz/fuzz-$$t-libfuzzer -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -artifact_prefix=$(BUILD)-fuzz/crash-$$t- $$dict \
	    $(BUILD)-fuzz/corpus/$$t tests/fuzz/corpus/$$t; \
	done

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz build-noyaml
