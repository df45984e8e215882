/* The tests' random data: a small xorshift, independent of the plugins' own hashes, with
 * no test framework behind it (test_support.h adds the cmocka helpers; the cuda plugin's
 * tests, plain C, include this alone).
 *
 * The generator's state starts at TEST_RNG_SEED, which the including file defines first:
 * each test file keeps its own seed, so its data are what they always were. */
#ifndef BV_TEST_RNG_H
#define BV_TEST_RNG_H

#include <stdint.h>

#ifndef TEST_RNG_SEED
#error "define TEST_RNG_SEED before including test_rng.h"
#endif

static uint64_t rng_state = TEST_RNG_SEED;

static inline uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [lo, hi) */
static inline float rng_float(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next() >> 40) * 0x1.0p-24f;
}

#endif
