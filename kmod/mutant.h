/* make check-mutants (tests/mutants.sh): each mutant breaks one invariant
 * on purpose, at the place the invariant is kept, so that the suite can
 * show it notices. A hook reads
 *
 *	if (MUTANT(release_early))      make check-mutants: output leaves before ACK
 *		repl_release_epoch(...);
 *
 * MUTANT(name) is the constant 1 in a build made with MUTANT=name (the
 * Makefile defines UNDERSTUDY_MUTANT_name) and 0 in every other build, where
 * the compiler drops the branch: the production code around it runs as if
 * the hook were not there. A name not in the list below does not compile,
 * so a misspelt hook cannot silently never fire. Here in kmod/, the lowest
 * layer, because hooks sit in every layer above it, host/ included. */
#ifndef US_KMOD_MUTANT_H
#define US_KMOD_MUTANT_H

/* Every mutant, as tests/mutants.sh's table names them. */
enum kmod_mutant {
	MUTANT_ID_release_early,
	MUTANT_ID_clear_after_copy,
	MUTANT_ID_apply_partial,
	MUTANT_ID_drop_state_section,
	MUTANT_ID_ack_before_staged,
	MUTANT_ID_takeover_while_alive,
	MUTANT_ID_console_at_takeover,
	MUTANT_ID_ignore_lease,
	MUTANT_ID_takeover_without_key,
	MUTANT_ID_keep_vouch,
	MUTANT_ID_net_release_early,
	MUTANT_ID_disk_apply_early,
	MUTANT_ID_silence_wraps,
	MUTANT_ID_precopy_keep_delta,
	MUTANT_ID_resume_forgets_kicks,
	MUTANT_ID_serve_while_missing,
	MUTANT_ID_refuse_reprotect,
	MUTANT_ID_notify_while_missing,
	MUTANT_ID_rx_while_missing,
	MUTANT_ID_day_alarm_ignored,
	MUTANT_ID_divider_reset_runs,
};

/* 1 when the macro x is defined as 1 (as -DX makes it), else 0: "0," is
 * pasted in only when x expanded to 1, shifting the 1 into second place. */
#define KMOD_MUTANT_ARG_1 0,
#define KMOD_MUTANT_SECOND(ignored, val, ...) val
#define KMOD_MUTANT_IS_1(x) KMOD_MUTANT_IS_1_(x)
#define KMOD_MUTANT_IS_1_(x) KMOD_MUTANT_IS_1__(KMOD_MUTANT_ARG_##x)
#define KMOD_MUTANT_IS_1__(arg) KMOD_MUTANT_SECOND(arg 1, 0, 0)

#define MUTANT(name) ((void)MUTANT_ID_##name, KMOD_MUTANT_IS_1(UNDERSTUDY_MUTANT_##name))

#endif
