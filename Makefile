# accel: convenience targets around meson.  `make demo` and `make test` work
# on a fresh Debian machine: they install missing packages first.
BUILD ?= build
MESON_OPTS ?=
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps setup build demo test test-asan clean

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

# AddressSanitizer + UBSan in a separate build directory.
test-asan: deps
	[ -f $(BUILD)-asan/build.ninja ] || meson setup $(BUILD)-asan -Db_sanitize=address,undefined -Db_lundef=false $(MESON_OPTS)
	ninja -C $(BUILD)-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  meson test -C $(BUILD)-asan --print-errorlogs --num-processes 2 --timeout-multiplier 4

clean:
	rm -rf $(BUILD) $(BUILD)-asan
