# SPDX-License-Identifier: MIT
# tests/abi-version.sh: sourced by the test scripts that compare what the CLI
# reports with the plugin ABI the tree is built with.  Sets ABI to
# "vMAJOR.MINOR" as read from abi/accel/types.h under $ACCEL_TEST_SRCDIR.
abi_h="$ACCEL_TEST_SRCDIR/abi/accel/types.h"
ABI=v$(sed -n 's/^#define ACCEL_ABI_MAJOR \([0-9]*\).*/\1/p' "$abi_h").$(sed -n 's/^#define ACCEL_ABI_MINOR \([0-9]*\).*/\1/p' "$abi_h")
case $ABI in
v[0-9]*.[0-9]*) ;;
*) echo "tests/abi-version.sh: no ACCEL_ABI_MAJOR/MINOR in $abi_h" >&2; exit 1 ;;
esac
