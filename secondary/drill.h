/* secondary/ inside: drills on the secondary (understudy drill), called
 * by secondary.c. A test-failover drill starts an isolated clone of the
 * standby at one complete checkpoint, runs it, probes it, compares its RAM
 * with the primary's digest of that epoch, and reports; the standby keeps
 * applying epochs meanwhile. drill.c says how. */
#ifndef US_SECONDARY_DRILL_H
#define US_SECONDARY_DRILL_H

#include "secondary/secondary_int.h"

/* Control requests starting with "drill" (the reply, malloc'd):
 *   drill test-failover [seconds=N] [probe=builtin|external]
 *   drill status           JSON: {"state": ..., "report": {...} once done}
 *   drill console-in HEX   external probe: bytes to the clone's console
 *   drill console-out N    external probe: the clone's output from offset N (hex)
 *   drill probe-done RC [TEXT]   external probe: its outcome (RC 0: passed)
 *   drill corrupt          test hook (UNDERSTUDY_TEST_HOOKS=1 only): flips a
 *                          byte of the standby's last page */
char *repl_drill_request(struct repl_secondary *s, const char *req);
/* A Section whose name starts with "drill-" (from the primary). */
int repl_drill_section(struct repl_secondary *s, const Understudy__Section *sec) US_MUST_CHECK;
/* Before the staged epoch is applied to the standby: a running clone gets
 * its own copy of every page the epoch writes (all: of every page, for an
 * epoch that clears the standby's RAM first). */
void repl_drill_before_apply(struct repl_secondary *s, bool all);
/* The staged epoch was applied: its console output is committed. */
void repl_drill_applied(struct repl_secondary *s);
void repl_drill_free(struct repl_secondary *s);

#endif
