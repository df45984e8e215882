/* bv_schedule (schedule.h): an array of instructions in the core's layout, appended to by
 * the pipeline engine and by resilience plugins built against any 1.x header. */
#include <stdlib.h>
#include <string.h>

#include "bivouac/schedule.h"
#include "grow.h"

void bv_schedule_init(bv_schedule *s)
{
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->instruction_size = sizeof(bv_instruction);
    s->stage = s->stages = s->microbatches = -1;
}

void bv_schedule_free(bv_schedule *s)
{
    free(s->items);
    bv_schedule_init(s);
}

bv_status bv_schedule_insert(bv_schedule *s, size_t at, const bv_instruction *ins,
                             size_t ins_size, bv_error *err)
{
    if (at > s->count)
        return bv_error_set(err, BV_ERR_INVALID, "no place %zu in a schedule of %zu "
                            "instructions", at, s->count);
    if (!bv_grow(&s->items, &s->cap, s->count, s->instruction_size, 16))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory growing a schedule");
    char *dst = (char *)s->items + at * s->instruction_size;
    memmove(dst + s->instruction_size, dst, (s->count - at) * s->instruction_size);
    size_t n = ins_size < s->instruction_size ? ins_size : s->instruction_size;
    memcpy(dst, ins, n);
    memset(dst + n, 0, s->instruction_size - n); /* fields the caller predates */
    s->count++;
    return BV_OK;
}

bv_status bv_schedule_append(bv_schedule *s, const bv_instruction *ins, size_t ins_size,
                             bv_error *err)
{
    return bv_schedule_insert(s, s->count, ins, ins_size, err);
}

const bv_instruction *bv_schedule_at(const bv_schedule *s, size_t i)
{
    return (const bv_instruction *)(const void *)((const char *)s->items +
                                                  i * s->instruction_size);
}
