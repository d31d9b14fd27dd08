/* A fuzz target is one decoder behind two entry points:
 *   fuzz_verdict()           runs the input through the decoder and says
 *                            whether it was accepted (0) or rejected (-errno);
 *   LLVMFuzzerTestOneInput() what libFuzzer calls (make fuzz): the same run,
 *                            the verdict ignored (only crashes and sanitizer
 *                            reports count there).
 * replay.c replays a saved corpus and asserts each file's verdict: a file
 * named ok-* must be accepted, bad-* rejected (see corpus/README). */
#ifndef US_FUZZ_H
#define US_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int fuzz_verdict(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_LIBFUZZER_ENTRY                                           \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)   \
	{                                                              \
		(void)fuzz_verdict(data, size);                        \
		return 0;                                              \
	}

#endif
