/* splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to seed and to draw
 * initial weights. */
#include "rng.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bv_rng_init(bv_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    r->state = splitmix64(&x);
}

uint64_t bv_rng_next(bv_rng *r)
{
    return splitmix64(&r->state);
}

double bv_rng_uniform(bv_rng *r)
{
    return (double)(bv_rng_next(r) >> 11) * 0x1.0p-53;
}
