# SPDX-License-Identifier: MIT
# tests/lib-ranks.sh: how the checkpoint test scripts run a program on N
# processes, and report a failure, sourced, not run:
#
#     . "$ACCEL_TEST_SRCDIR/tests/lib-ranks.sh"
#
#   fail WHAT...            "FAIL: WHAT" on stderr, then, when the script
#                           defines a function fail_details, its output on
#                           stderr too (the logs it kept, say); exit 1
#   ranks N CMD [ARGS...]   CMD on N processes under `accel launch -n N`
#                           ($ACCEL_CLI), or directly when N is 1 (no
#                           launcher: the single-process path is tested
#                           too); each bounded by $RANKS_TIMEOUT seconds
#                           (default 120) so a hang fails the test
#   run N [ARGS...]         examples/train_mlp ($T: the caller sets it, an
#                           absolute path) on N processes with ranks, its
#                           flags $MLP_FLAGS, then ARGS
#
# MLP_FLAGS, set here, is a small run: 16 hidden units, 96 samples in
# batches of 16, no evaluation, a progress line every 100 steps.  A script
# that wants more flags on every run appends them after sourcing this:
# MLP_FLAGS="$MLP_FLAGS --set ...".

MLP_FLAGS="--hidden 16 --samples 96 --batch-size 16 --no-eval --test-samples 0 --log-every 100"

fail() {
	echo "FAIL: $*" >&2
	if command -v fail_details >/dev/null 2>&1; then
		fail_details >&2 || true
	fi
	exit 1
}

ranks() {
	ranks_n_=$1
	shift
	if [ "$ranks_n_" = 1 ]; then
		timeout "${RANKS_TIMEOUT:-120}" "$@"
	else
		timeout "${RANKS_TIMEOUT:-120}" "$ACCEL_CLI" launch -n "$ranks_n_" -- "$@"
	fi
}

run() {
	run_n_=$1
	shift
	# MLP_FLAGS is split into words on purpose
	# shellcheck disable=SC2086
	ranks "$run_n_" "$T" $MLP_FLAGS "$@"
}
