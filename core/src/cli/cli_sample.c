/* `bivouac sample --checkpoint DIR`: rebuilds a sequence model from a checkpoint written by
 * the checkpoint plugin (which carries the model section, the block size and the
 * tokeniser's vocabulary) and generates text from a prompt. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "bivouac/seqmodel.h"
#include "cli.h"
#include "config.h"
#include "registry.h"
#include "rng.h"
#include "layer_engine.h"

typedef struct sample_args {
    const char *checkpoint;
    const char *prompt;
    long long tokens;
    double temperature;
    long long top_k;
    unsigned long long seed;
} sample_args;

/* The ranges of the numeric flags (listed in `bivouac --help`). The token count bounds
 * the id buffer (prompt + tokens) and the run time; the seed is an integer a double holds
 * exactly, as for `bivouac run --seed`. */
#define TOKENS_MAX 1000000
#define TEMPERATURE_MAX 100.0
#define TOP_K_MAX 1000000
#define SEED_MAX 9007199254740992LL /* 2^53 */

static int parse_args(int argc, char **argv, sample_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "%s: unknown option or missing value (see "
                               "bivouac --help)", arg);
        const char *val = argv[++i];
        long long seed = 0;
        if (!strcmp(arg, "--checkpoint")) {
            a->checkpoint = val;
        } else if (!strcmp(arg, "--prompt")) {
            a->prompt = val;
        } else if (!strcmp(arg, "--tokens")) {
            if (bv_cli_int_arg(arg, val, 1, TOKENS_MAX, &a->tokens))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--temperature")) {
            if (bv_cli_number_arg(arg, val, 0, TEMPERATURE_MAX, &a->temperature))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--top-k")) {
            if (bv_cli_int_arg(arg, val, 0, TOP_K_MAX, &a->top_k))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--seed")) {
            if (bv_cli_int_arg(arg, val, 0, SEED_MAX, &seed))
                return BV_EXIT_USAGE;
            a->seed = (unsigned long long)seed;
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)", arg);
        }
    }
    if (!a->checkpoint)
        return bv_cli_fail(BV_EXIT_USAGE, "sample needs --checkpoint DIR");
    return 0;
}

/* Newest good checkpoint in DIR, or in DIR/checkpoints (a run directory). */
static int load_checkpoint(bv_registry *reg, const char *dir, bv_state *s)
{
    bv_error err = {0};
    const bv_plugin *p = bv_registry_get(reg, BV_KIND_RESILIENCE, "checkpoint", &err);
    if (!p || !p->get_proc_address)
        return bv_cli_fail(BV_EXIT_FAILED, "cannot read checkpoints: %s",
                           err.msg[0] ? err.msg : "no restore_dir in the checkpoint plugin");
    bv_status (*restore_dir)(const char *, bv_state *, bv_error *);
    void *fn = p->get_proc_address("restore_dir");
    memcpy(&restore_dir, &fn, sizeof restore_dir);
    if (!fn)
        return bv_cli_fail(BV_EXIT_FAILED, "the checkpoint plugin exports no restore_dir");
    if (restore_dir(dir, s, &err) == BV_OK)
        return 0;
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    bv_error err2 = {0};
    if (restore_dir(sub, s, &err2) == BV_OK)
        return 0;
    return bv_cli_fail(BV_EXIT_USAGE, "%s", err.msg);
}

static char *blob_string(const bv_state *s, const char *name)
{
    const bv_blob *b = bv_state_find(s, name);
    if (!b)
        return NULL;
    char *t = malloc(b->size + 1);
    if (t) {
        memcpy(t, b->data, b->size);
        t[b->size] = '\0';
    }
    return t;
}

static void put_utf8(uint32_t cp)
{
    char buf[4];
    int n;
    if (cp < 0x80) {
        buf[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        buf[0] = (char)(0xC0 | cp >> 6);
        buf[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | cp >> 12);
        buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        buf[0] = (char)(0xF0 | cp >> 18);
        buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    fwrite(buf, 1, (size_t)n, stdout);
}

/* Why a prompt cannot be encoded: the character (or, for bad UTF-8, the byte) and where. */
typedef struct prompt_error {
    bool bad_utf8;
    uint32_t cp;       /* the code point, or the byte that is not UTF-8 */
    long long at;      /* 1-based: the character, or the byte offset for bad UTF-8 */
    const char *text;  /* the character as it appears in the prompt */
    int len;
} prompt_error;

/* The prompt as token ids; -1 with *why filled on bad UTF-8 or a character the
 * vocabulary (sorted code points) lacks. */
static long long encode(const char *text, const uint32_t *vocab, int64_t nv, int32_t *ids,
                        long long cap, prompt_error *why)
{
    long long n = 0;
    const unsigned char *p = (const unsigned char *)text;
    while (*p && n < cap) {
        uint32_t cp = *p;
        int len = cp < 0x80 ? 1 : (cp & 0xE0) == 0xC0 ? 2 : (cp & 0xF0) == 0xE0 ? 3
                : (cp & 0xF8) == 0xF0 ? 4 : 0;
        bool ok = len > 0;
        cp = len == 1 ? cp : cp & (0x7Fu >> len);
        for (int i = 1; ok && i < len; i++) {
            ok = (p[i] & 0xC0) == 0x80; /* stops at the terminating NUL too */
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if (!ok) {
            *why = (prompt_error){true, *p, (long long)(p - (const unsigned char *)text) + 1,
                                  (const char *)p, 1};
            return -1;
        }
        int64_t lo = 0, hi = nv;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (vocab[mid] < cp)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == nv || vocab[lo] != cp) {
            *why = (prompt_error){false, cp, n + 1, (const char *)p, len};
            return -1;
        }
        ids[n++] = (int32_t)lo;
        p += len;
    }
    return n;
}

/* "the prompt has 'é' (U+00E9) at character 3, which is not in the model's vocabulary
 * of 65 characters"; a control character is shown by its code point only. */
static int prompt_failure(const prompt_error *why, int64_t nv)
{
    if (why->bad_utf8)
        return bv_cli_fail(BV_EXIT_USAGE, "the prompt is not UTF-8: invalid byte 0x%02X at "
                           "byte %lld", why->cp, why->at);
    if (why->cp < 0x20 || (why->cp >= 0x7F && why->cp < 0xA0))
        return bv_cli_fail(BV_EXIT_USAGE, "the prompt has U+%04X at character %lld, which is "
                           "not in the model's vocabulary of %lld characters", why->cp,
                           why->at, (long long)nv);
    return bv_cli_fail(BV_EXIT_USAGE, "the prompt has '%.*s' (U+%04X) at character %lld, "
                       "which is not in the model's vocabulary of %lld characters", why->len,
                       why->text, why->cp, why->at, (long long)nv);
}

/* Samples one token from logits / temperature restricted to the top k (0: all). */
static int32_t pick(const float *logits, int64_t v, double temperature, long long top_k,
                    bv_rng *rng, double *probs)
{
    int64_t best = 0;
    for (int64_t i = 1; i < v; i++)
        if (logits[i] > logits[best])
            best = i;
    if (temperature == 0.0)
        return (int32_t)best;
    double cutoff = -INFINITY;
    if (top_k > 0 && top_k < v) { /* the k-th largest logit, by selection */
        for (int64_t i = 0; i < v; i++)
            probs[i] = logits[i];
        for (long long r = 0; r < top_k; r++) {
            int64_t m = -1;
            for (int64_t i = 0; i < v; i++)
                if (probs[i] != -INFINITY && (m < 0 || probs[i] > probs[m]))
                    m = i;
            cutoff = probs[m];
            probs[m] = -INFINITY;
        }
    }
    double sum = 0, mx = logits[best];
    for (int64_t i = 0; i < v; i++) {
        probs[i] = logits[i] >= cutoff ? exp(((double)logits[i] - mx) / temperature) : 0.0;
        sum += probs[i];
    }
    double u = bv_rng_uniform(rng) * sum;
    for (int64_t i = 0; i < v; i++) {
        u -= probs[i];
        if (u < 0 && probs[i] > 0)
            return (int32_t)i;
    }
    return (int32_t)best;
}

int bv_cli_sample(int argc, char **argv)
{
    sample_args a = {.prompt = "\n", .tokens = 500, .temperature = 0.8, .top_k = 200,
                     .seed = 1337};
    int code = parse_args(argc, argv, &a);
    if (code)
        return code;
    bv_registry *reg = bv_registry_new();
    bv_state s = {0};
    bv_node *root = NULL;
    bv_opts mopts = {0}, copts = {0};
    bv_seq_model *model = NULL;
    bv_compute *c = NULL;
    bv_layer_engine *e = NULL;
    bv_seq_model_ops mops_copy;
    bv_compute_ops k_copy;
    const bv_seq_model_ops *mops = NULL;
    const bv_compute_ops *k = NULL;
    int32_t *ids = NULL;
    double *probs = NULL;
    char *plugin = NULL, *section = NULL;
    bv_diag d;
    bv_diag_init(&d);
    bv_error err = {0};
    if ((code = load_checkpoint(reg, a.checkpoint, &s)))
        goto done;
    plugin = blob_string(&s, "model/plugin");
    section = blob_string(&s, "model/section");
    const bv_blob *vb = bv_state_find(&s, "tokenizer/vocab");
    int64_t block = 0;
    const bv_blob *bb = bv_state_find(&s, "model/block");
    if (!plugin || !section || !vb || !bb || bb->size != sizeof block) {
        code = bv_cli_fail(BV_EXIT_USAGE, "%s: the checkpoint has no sequence model "
                           "(model/plugin, model/section, tokenizer/vocab)", a.checkpoint);
        goto done;
    }
    memcpy(&block, bb->data, sizeof block);
    const uint32_t *vocab = vb->data;
    int64_t nv = (int64_t)(vb->size / sizeof *vocab);
    const bv_plugin *mp = bv_registry_get(reg, BV_KIND_MODEL, plugin, &err);
    const bv_plugin *cp = mp ? bv_registry_get(reg, BV_KIND_COMPUTE, "cpu", &err) : NULL;
    if (!mp || !cp) {
        code = bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
        goto done;
    }
    if (strcmp(bv_plugin_model_engine(mp), "sequence") != 0) {
        code = bv_cli_fail(BV_EXIT_USAGE, "model '%s' is not a sequence model", plugin);
        goto done;
    }
    bv_ops_copy(&mops_copy, sizeof mops_copy, mp); /* this build's size, defaults filled */
    bv_ops_copy(&k_copy, sizeof k_copy, cp);
    mops = &mops_copy;
    k = &k_copy;
    static const char *const ignore[] = {"plugin", NULL};
    if (bv_config_load_string(section, "checkpoint:model", &root, &d) != BV_OK ||
        bv_config_validate(root, "model", bv_registry_options(reg, mp), ignore, &mopts, &d) !=
            BV_OK ||
        bv_opts_defaults(&copts, "compute", bv_registry_options(reg, cp), &err) != BV_OK) {
        bv_cli_print_diag(&d);
        code = bv_cli_fail(BV_EXIT_USAGE, "the checkpoint's model section does not fit "
                           "plugin '%s' %s", plugin, err.msg);
        goto done;
    }
    bv_seq_shape shape = {nv, block, 1};
    if (!(model = mops->create(&mopts, &shape, &err)) || !(c = k->create(&copts, &err)) ||
        bv_layer_engine_create(mops, model, k, c, 1, block, &e, &err) != BV_OK) {
        code = bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
        goto done;
    }
    for (size_t l = 0; l < mops->layer_count(model); l++)
        if (bv_layer_engine_layer_set(e, l, false, &s, &err) != BV_OK) {
            code = bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
            goto done;
        }
    long long cap = (long long)strlen(a.prompt) + a.tokens + 1;
    ids = malloc((size_t)cap * sizeof *ids);
    probs = malloc((size_t)nv * sizeof *probs);
    if (!ids || !probs) {
        code = bv_cli_fail(BV_EXIT_FAILED, "out of memory");
        goto done;
    }
    prompt_error why = {0};
    long long n = encode(a.prompt, vocab, nv, ids, cap, &why);
    if (n < 0) {
        code = prompt_failure(&why, nv);
        goto done;
    }
    if (n == 0) /* an empty prompt starts from the first token */
        ids[n++] = 0;
    fputs(a.prompt, stdout);
    bv_rng rng;
    bv_rng_init(&rng, a.seed, 0x5A);
    for (long long t = 0; t < a.tokens; t++) {
        int64_t ctx = n < block ? n : block;
        const float *logits;
        if (bv_layer_engine_forward(e, ids + n - ctx, 1, ctx, false, a.seed, 0, &logits, &err) !=
            BV_OK) {
            code = bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
            goto done;
        }
        int32_t next = pick(logits + (ctx - 1) * nv, nv, a.temperature, a.top_k, &rng, probs);
        ids[n++] = next;
        put_utf8(vocab[next]);
        fflush(stdout);
    }
    fputc('\n', stdout);
done:
    bv_layer_engine_free(e);
    if (c)
        k->destroy(c);
    if (model)
        mops->destroy(model);
    bv_opts_free(&mopts);
    bv_opts_free(&copts);
    bv_node_free(root);
    bv_diag_free(&d);
    bv_state_free(&s);
    free(plugin);
    free(section);
    free(ids);
    free(probs);
    bv_registry_free(reg);
    return code;
}
