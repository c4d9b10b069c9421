#!/bin/sh
# The installed ABI headers are plain C99 (DESIGN.md, abi/accel/types.h):
# each compiles on its own with -std=c99 -pedantic-errors and every
# warning an error, and as C++ (extern "C"), so a third party's strict
# build of a plugin never fails in our headers.
#   test-abi-headers.sh SRCDIR CC
set -u
src=$1 cc=$2
fail=0
for h in types plugin comm device; do
	printf '#include "accel/%s.h"\nint accel_abi_headers_test_%s;\n' "$h" "$h" |
		"$cc" -std=c99 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only -I "$src/abi" -x c - ||
		{ echo "FAIL: accel/$h.h is not strict C99"; fail=1; }
	if command -v c++ >/dev/null 2>&1; then
		printf '#include "accel/%s.h"\n' "$h" |
			c++ -std=c++11 -Wall -Wextra -Werror -fsyntax-only -I "$src/abi" -x c++ - ||
			{ echo "FAIL: accel/$h.h does not compile as C++11"; fail=1; }
	fi
done
[ $fail = 0 ] && echo "PASS: abi headers are strict C99 (and C++11)"
exit $fail
