/* Deterministic random numbers for initialisation and generators: splitmix64 streams. */
#ifndef BIVOUAC_RNG_H
#define BIVOUAC_RNG_H

#include <stdint.h>

typedef struct bv_rng {
    uint64_t state;
} bv_rng;

/* A stream for (seed, stream): different streams are independent for practical use. */
void bv_rng_init(bv_rng *r, uint64_t seed, uint64_t stream);
uint64_t bv_rng_next(bv_rng *r);
/* Uniform in [0, 1) with 53 bits. */
double bv_rng_uniform(bv_rng *r);

#endif
