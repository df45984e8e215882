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
