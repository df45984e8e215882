/* Training-state blobs shared by the engines and resilience plugins (resilience.h). */
#include "bivouac/resilience.h"

#include <stdlib.h>
#include <string.h>

void bv_state_free(bv_state *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++) {
        free(s->blobs[i].name);
        free(s->blobs[i].data);
    }
    free(s->blobs);
    s->blobs = NULL;
    s->count = 0;
}

const bv_blob *bv_state_find(const bv_state *s, const char *name)
{
    for (size_t i = 0; s && i < s->count; i++)
        if (strcmp(s->blobs[i].name, name) == 0)
            return &s->blobs[i];
    return NULL;
}

bv_status bv_state_add(bv_state *s, const char *name, const void *data, size_t size)
{
    bv_blob *b = realloc(s->blobs, (s->count + 1) * sizeof *b);
    if (!b)
        return BV_ERR_NOMEM;
    s->blobs = b;
    b = &s->blobs[s->count];
    b->name = strdup(name);
    b->data = malloc(size ? size : 1);
    if (!b->name || !b->data) {
        free(b->name);
        free(b->data);
        return BV_ERR_NOMEM;
    }
    if (size)
        memcpy(b->data, data, size);
    b->size = size;
    s->count++;
    return BV_OK;
}

bool bv_state_read(const bv_state *s, const char *name, void *out, size_t size)
{
    const bv_blob *b = bv_state_find(s, name);
    if (!b || b->size != size)
        return false;
    memcpy(out, b->data, size);
    return true;
}
