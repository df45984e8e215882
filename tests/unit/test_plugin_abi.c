/* Tests for the ABI 1.4 element sizes (core/src/plugin/plugin_arrays.c, registry.c,
 * plugin_defaults.c, schedule.c): stages, sequence layers and option arrays read from a
 * plugin built with a smaller or a bigger struct than this build's; the core defaults of
 * NULL slots; the engine of old and new model descriptors; schedule appends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "bivouac/cloud.h"
#include "bivouac/resilience.h"
#include "bivouac/schedule.h"
#include "bivouac/transport.h"
#include "plugin_arrays.h"
#include "registry.h"

/* A "future" plugin's struct: this build's fields, then ones this core does not know. */
typedef struct stage_future {
    bv_stage now;
    int64_t extra[3];
} stage_future;

typedef struct param_future {
    bv_seq_param now;
    double extra[2];
} param_future;

typedef struct layer_future {
    bv_seq_layer now;
    int64_t extra;
} layer_future;

typedef struct option_future {
    bv_option now;
    const char *extra[2];
} option_future;

static void stage_copy_of_a_bigger_stage_keeps_what_it_knows(void **state)
{
    (void)state;
    stage_future big;
    memset(&big, 0x5a, sizeof big);
    big.now = (bv_stage){.kind = BV_STAGE_GATHER, .name = "GA1", .in_dim = 64, .out_dim = 64,
                         .in_offset = 8, .heads = 8, .weighted = true, .weights_stage = 3};
    bv_model_ops ops = {.stage_size = sizeof big};
    bv_stage out;
    memset(&out, 0xff, sizeof out);
    bv_stage_copy(&ops, &big.now, &out);
    assert_int_equal(out.kind, BV_STAGE_GATHER);
    assert_string_equal(out.name, "GA1");
    assert_int_equal(out.in_dim, 64);
    assert_int_equal(out.in_offset, 8);
    assert_int_equal(out.heads, 8);
    assert_true(out.weighted);
    assert_int_equal(out.weights_stage, 3);
}

static void stage_copy_of_a_smaller_stage_zero_fills_the_rest(void **state)
{
    (void)state;
    /* An ABI 1.0 stage ended at needs_input_grad: the 1.1 fields must read zero, not the
     * bytes that happen to follow it in the plugin's memory. */
    size_t old = offsetof(bv_stage, in_offset);
    unsigned char buf[sizeof(bv_stage)];
    memset(buf, 0x5a, sizeof buf);
    bv_stage v10 = {.kind = BV_STAGE_TENSOR, .name = "AV0", .in_dim = 10, .out_dim = 4,
                    .needs_input_grad = true};
    memcpy(buf, &v10, old);
    bv_model_ops ops = {.stage_size = old};
    bv_stage out;
    memset(&out, 0xff, sizeof out);
    bv_stage_copy(&ops, (const bv_stage *)(const void *)buf, &out);
    assert_int_equal(out.kind, BV_STAGE_TENSOR);
    assert_int_equal(out.out_dim, 4);
    assert_true(out.needs_input_grad);
    assert_int_equal(out.in_offset, 0);
    assert_int_equal(out.heads, 0);
    assert_false(out.weighted);
    assert_int_equal(out.weights_stage, 0);
}

static void stage_size_zero_means_the_abi_1_3_size(void **state)
{
    (void)state;
    bv_stage s = {.kind = BV_STAGE_EDGE, .name = "AE0", .in_dim = 16, .out_dim = 2,
                  .in_offset = 4, .heads = 2, .weights_stage = 7,
                  .sparse_input = true}; /* past a 1.3 plugin's element: never read */
    bv_model_ops ops = {.stage_size = 0}; /* a 1.3 plugin, through bv_ops_copy */
    bv_stage out;
    bv_stage_copy(&ops, &s, &out);
    assert_memory_equal(&out, &s, BV_STAGE_SIZE_1_3);
    assert_true(BV_STAGE_SIZE_1_3 < sizeof(bv_stage)); /* 1.15 added sparse_input */
    assert_false(out.sparse_input);
}

static void seq_layer_copy_of_bigger_elements(void **state)
{
    (void)state;
    param_future params[3];
    memset(params, 0x5a, sizeof params);
    const char *names[3] = {"wqkv", "ln_g", "wte"};
    for (int i = 0; i < 3; i++)
        params[i].now = (bv_seq_param){.name = names[i], .rows = 10 + i, .cols = 20 + i,
                                       .weight_decay = i != 1, .init = BV_SEQ_INIT_NORMAL,
                                       .init_std = 0.02f, .tied_layer = -1, .tied_param = -1};
    params[2].now.tied_layer = 0;
    params[2].now.tied_param = 0;
    layer_future layer;
    memset(&layer, 0x5a, sizeof layer);
    layer.now = (bv_seq_layer){.name = "block0", .kind = BV_SEQ_BLOCK, .in_width = 32,
                               .out_width = 32, .nparams = 3,
                               .params = (const bv_seq_param *)(const void *)params};
    bv_seq_model_ops ops = {.layer_size = sizeof layer, .param_size = sizeof params[0]};
    bv_seq_layer out;
    bv_error err = {0};
    assert_int_equal(bv_seq_layer_copy(&ops, &layer.now, &out, &err), BV_OK);
    assert_string_equal(out.name, "block0");
    assert_int_equal(out.kind, BV_SEQ_BLOCK);
    assert_int_equal(out.nparams, 3);
    assert_ptr_not_equal(out.params, layer.now.params); /* a normalised copy */
    for (int i = 0; i < 3; i++) {
        assert_string_equal(out.params[i].name, names[i]);
        assert_int_equal(out.params[i].rows, 10 + i);
        assert_int_equal(out.params[i].cols, 20 + i);
        assert_int_equal(out.params[i].weight_decay, i != 1);
        assert_true(out.params[i].init_std == 0.02f);
    }
    assert_int_equal(out.params[0].tied_layer, -1);
    assert_int_equal(out.params[2].tied_layer, 0);
    assert_int_equal(out.params[2].tied_param, 0);
    bv_seq_layer_copy_free(&out);
    assert_null(out.params);
}

static void seq_layer_copy_of_smaller_elements_zero_fills(void **state)
{
    (void)state;
    /* A plugin whose bv_seq_param ended before tied_layer (a smaller element): stride and
     * the missing fields both come from its declared size. */
    size_t psize = offsetof(bv_seq_param, tied_layer);
    unsigned char params[2 * sizeof(bv_seq_param)];
    memset(params, 0x5a, sizeof params);
    for (int i = 0; i < 2; i++) {
        bv_seq_param p = {.name = i ? "b" : "a", .rows = 1 + i, .cols = 3, .init_std = 1.0f};
        memcpy(params + (size_t)i * psize, &p, psize);
    }
    size_t lsize = offsetof(bv_seq_layer, params) + sizeof(void *);
    bv_seq_layer layer = {.name = "embed", .kind = BV_SEQ_EMBED, .out_width = 8, .nparams = 2,
                          .params = (const bv_seq_param *)(const void *)params};
    bv_seq_model_ops ops = {.layer_size = lsize, .param_size = psize};
    bv_seq_layer out;
    bv_error err = {0};
    assert_int_equal(bv_seq_layer_copy(&ops, &layer, &out, &err), BV_OK);
    assert_int_equal(out.nparams, 2);
    assert_string_equal(out.params[0].name, "a");
    assert_string_equal(out.params[1].name, "b");
    assert_int_equal(out.params[1].rows, 2);
    assert_int_equal(out.params[1].cols, 3);
    assert_int_equal(out.params[0].tied_layer, 0); /* zero: not read past the element */
    assert_int_equal(out.params[1].tied_param, 0);
    bv_seq_layer_copy_free(&out);

    /* declared sizes 0: the ABI 1.3 sizes, which are this build's */
    bv_seq_param p13[1] = {{.name = "w", .rows = 4, .cols = 5, .tied_layer = -1,
                            .tied_param = -1}};
    layer.nparams = 1;
    layer.params = p13;
    bv_seq_model_ops ops13 = {0};
    assert_int_equal(bv_seq_layer_copy(&ops13, &layer, &out, &err), BV_OK);
    assert_memory_equal(&out.params[0], &p13[0], sizeof p13[0]);
    bv_seq_layer_copy_free(&out);
}

static void options_are_normalised_from_any_element_size(void **state)
{
    (void)state;
    option_future big[3];
    memset(big, 0x5a, sizeof big);
    big[0].now = (bv_option)BV_OPT_INT_RANGE("hidden", "16", 1, 64, "width");
    big[1].now = (bv_option)BV_OPT_CHOICE("act", "relu", "relu|elu", "activation");
    big[2].now = (bv_option)BV_OPT_END;
    bv_option *o = bv_options_normalise(&big[0].now, sizeof big[0]);
    assert_non_null(o);
    assert_string_equal(o[0].name, "hidden");
    assert_true(o[0].has_range);
    assert_true(o[0].max == 64);
    assert_string_equal(o[1].name, "act");
    assert_string_equal(o[1].choices, "relu|elu");
    assert_null(o[2].name);
    assert_int_equal(bv_schema_count(o), 2);
    free(o);

    /* smaller: an element that ends before `doc` gets doc == NULL */
    size_t small = offsetof(bv_option, doc);
    unsigned char buf[3 * sizeof(bv_option)];
    memset(buf, 0x5a, sizeof buf);
    bv_option a = BV_OPT_BOOLEAN("bias", "true", "ignored");
    bv_option end = BV_OPT_END;
    memcpy(buf, &a, small);
    memcpy(buf + small, &end, small);
    o = bv_options_normalise((const bv_option *)(const void *)buf, small);
    assert_string_equal(o[0].name, "bias");
    assert_int_equal(o[0].type, BV_OPT_BOOL);
    assert_null(o[0].doc);
    assert_null(o[1].name);
    free(o);

    /* 0: the 1.3 size */
    bv_option v13[] = {BV_OPT_STR("note", "", "d"), BV_OPT_END};
    o = bv_options_normalise(v13, 0);
    assert_memory_equal(&o[0], &v13[0], sizeof v13[0]);
    assert_null(o[1].name);
    free(o);
    assert_null(bv_options_normalise(NULL, 0));
}

/* ---- bv_ops_copy's defaults ---- */

static int sent_payloads;
static bv_status fake_send(bv_endpoint *ep, const void *h, size_t hl, const void *p,
                           size_t pl, bv_error *err)
{
    (void)ep, (void)h, (void)hl, (void)err;
    sent_payloads += (int)pl && ((const char *)p)[0] == 'x';
    return BV_OK;
}

static void null_slots_get_the_core_defaults(void **state)
{
    (void)state;
    /* a 1.3 resilience plugin: create, destroy, epoch_end NULL, restore NULL */
    bv_resilience_ops r13 = {0};
    bv_plugin pr = {.kind = BV_KIND_RESILIENCE, .ops = &r13,
                    .ops_size = offsetof(bv_resilience_ops, before_task)};
    bv_resilience_ops r;
    bv_ops_copy(&r, sizeof r, &pr);
    bv_error err = {0};
    assert_non_null(r.epoch_end);
    assert_int_equal(r.epoch_end(NULL, NULL, &err), BV_OK);
    assert_null(r.restore); /* "keeps no state" */
    bv_task_decision d = {.size = sizeof d, .run_now = true, .weight_version = -1};
    assert_int_equal(r.before_task(NULL, NULL, &d, &err), BV_OK);
    assert_true(d.run_now);
    assert_int_equal(r.peer_failed(NULL, NULL, &err), BV_OK);
    assert_int_equal(r.peer_joined(NULL, NULL, &err), BV_OK);
    assert_int_equal(r.schedule(NULL, NULL, &err), BV_OK);

    bv_transport_ops t10 = {.send = fake_send}; /* no bound_address, no send_owned */
    bv_plugin pt = {.kind = BV_KIND_TRANSPORT, .ops = &t10,
                    .ops_size = offsetof(bv_transport_ops, bound_address)};
    bv_transport_ops t;
    bv_ops_copy(&t, sizeof t, &pt);
    assert_null(t.bound_address(NULL));
    char *payload = malloc(4);
    memcpy(payload, "xyz", 4);
    sent_payloads = 0;
    assert_int_equal(t.send_owned(NULL, "h", 1, payload, 4, &err), BV_OK); /* frees it */
    assert_int_equal(sent_payloads, 1);
    /* ABI 1.6: counters defaults to zeros, written only as far as the caller's size. */
    bv_transport_counters tc;
    memset(&tc, 0x7f, sizeof tc);
    tc.size = sizeof tc;
    t.counters(NULL, &tc);
    assert_int_equal(tc.size, sizeof tc);
    assert_int_equal(tc.frames_malformed, 0);
    assert_int_equal(tc.auth_rejected, 0);
    assert_int_equal(tc.send_timeouts, 0);
    memset(&tc, 0x7f, sizeof tc);
    tc.size = offsetof(bv_transport_counters, auth_rejected); /* an older caller */
    t.counters(NULL, &tc);
    assert_int_equal(tc.size, offsetof(bv_transport_counters, auth_rejected));
    assert_int_equal(tc.frames_malformed, 0);
    assert_int_equal(tc.auth_rejected, 0x7f7f7f7f7f7f7f7fu);

    bv_cloud_ops c13 = {0};
    bv_plugin pc = {.kind = BV_KIND_CLOUD, .ops = &c13,
                    .ops_size = offsetof(bv_cloud_ops, price_per_hour)};
    bv_cloud_ops c;
    bv_ops_copy(&c, sizeof c, &pc);
    double price = -1;
    assert_int_equal(c.price_per_hour(NULL, "any", true, &price, &err), BV_OK);
    assert_true(price == 0);

    /* models: no generic default, a NULL slot stays NULL */
    bv_model_ops m10 = {0};
    bv_plugin pm = {.kind = BV_KIND_MODEL, .ops = &m10,
                    .ops_size = offsetof(bv_model_ops, edge_forward)};
    bv_model_ops m;
    bv_ops_copy(&m, sizeof m, &pm);
    assert_null(m.validate);
    assert_null(m.edge_forward);
    assert_int_equal(m.stage_size, 0);
}

static void model_engine_comes_from_the_descriptor_or_the_legacy_field(void **state)
{
    (void)state;
    bv_seq_model_ops seq = {.engine = BV_ENGINE_SEQUENCE};
    bv_plugin p13 = {.abi_major = 1, .abi_minor = 3, .struct_size = sizeof(bv_plugin),
                     .kind = BV_KIND_MODEL, .ops = &seq, .ops_size = sizeof seq};
    assert_string_equal(bv_plugin_model_engine(&p13), "sequence");
    bv_model_ops graph = {0};
    bv_plugin p14 = {.abi_major = 1, .abi_minor = 4, .struct_size = sizeof(bv_plugin),
                     .kind = BV_KIND_MODEL, .ops = &graph, .ops_size = sizeof graph,
                     .engine = "graph"};
    assert_string_equal(bv_plugin_model_engine(&p14), "graph");
    /* a 1.3 descriptor is not trusted with what was reserved space */
    p13.engine = "graph";
    assert_string_equal(bv_plugin_model_engine(&p13), "sequence");
    bv_plugin compute = {.abi_minor = 4, .kind = BV_KIND_COMPUTE};
    assert_null(bv_plugin_model_engine(&compute));
}

static void schedule_appends_from_any_instruction_size(void **state)
{
    (void)state;
    bv_schedule s;
    bv_schedule_init(&s);
    bv_error err = {0};
    bv_instruction fwd = {.op = BV_INSTR_FORWARD, .microbatch = 2, .stage = 1, .peer = -1,
                          .version = 5};
    for (int i = 0; i < 40; i++) /* past the first growth */
        assert_int_equal(bv_schedule_append(&s, &fwd, sizeof fwd, &err), BV_OK);
    /* an older plugin's instruction that ended before `version` */
    unsigned char old[sizeof(bv_instruction)];
    memset(old, 0x5a, sizeof old);
    bv_instruction send = {.op = BV_INSTR_SEND_ACT, .microbatch = 3, .stage = 1, .peer = 7};
    memcpy(old, &send, offsetof(bv_instruction, version));
    assert_int_equal(bv_schedule_append(&s, (const bv_instruction *)(const void *)old,
                                        offsetof(bv_instruction, version), &err),
                     BV_OK);
    assert_int_equal(s.count, 41);
    assert_int_equal(bv_schedule_at(&s, 39)->version, 5);
    const bv_instruction *last = bv_schedule_at(&s, 40);
    assert_int_equal(last->op, BV_INSTR_SEND_ACT);
    assert_int_equal(last->peer, 7);
    assert_int_equal(last->version, 0);
    bv_schedule_free(&s);
    assert_int_equal(s.count, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stage_copy_of_a_bigger_stage_keeps_what_it_knows),
        cmocka_unit_test(stage_copy_of_a_smaller_stage_zero_fills_the_rest),
        cmocka_unit_test(stage_size_zero_means_the_abi_1_3_size),
        cmocka_unit_test(seq_layer_copy_of_bigger_elements),
        cmocka_unit_test(seq_layer_copy_of_smaller_elements_zero_fills),
        cmocka_unit_test(options_are_normalised_from_any_element_size),
        cmocka_unit_test(null_slots_get_the_core_defaults),
        cmocka_unit_test(model_engine_comes_from_the_descriptor_or_the_legacy_field),
        cmocka_unit_test(schedule_appends_from_any_instruction_size),
    };
    return cmocka_run_group_tests_name("plugin ABI", tests, NULL, NULL);
}
