# SPDX-License-Identifier: MIT
# tests/lib-ranks.sh: how the checkpoint test scripts run a program on N
# processes, sourced, not run:
#
#     . "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"
#
#   ranks N CMD [ARGS...]   CMD on N processes under `accel launch -n N`
#                           ($ACCEL_CLI), or directly when N is 1 (no
#                           launcher: the single-process path is tested
#                           too); each bounded by $RANKS_TIMEOUT seconds
#                           (default 120) so a hang fails the test

ranks() {
	ranks_n_=$1
	shift
	if [ "$ranks_n_" = 1 ]; then
		timeout "${RANKS_TIMEOUT:-120}" "$@"
	else
		timeout "${RANKS_TIMEOUT:-120}" "$ACCEL_CLI" launch -n "$ranks_n_" -- "$@"
	fi
}
