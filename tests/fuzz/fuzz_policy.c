/* Fuzz target: the Lua policy sandbox (policy.c). The input is a policy script: it is
 * loaded with two parameters under a small budget (100,000 instructions, 8 MiB), then
 * on_train_begin and on_epoch_end are called with fixed metrics and their actions read.
 * The small limits keep slow or greedy scripts from eating the fuzzing time; the sandbox
 * must turn each of them into an error, never a crash or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bivouac/log.h"
#include "fuzz_util.h"
#include "policy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "policy.lua");
    fuzz_write_file(path, data, size);

    static const bv_policy_param params[] = {
        {"patience", "10"}, {"mode", "max"}, {"verbose", "true"}};
    static const bv_metric metrics[] = {
        {"epoch", 3}, {"loss", 0.75}, {"val_loss", 0.8}, {"val_accuracy", 0.61}, {"lr", 0.01}};
    const bv_policy_limits lim = {.instructions = 100000, .memory_bytes = (size_t)8 << 20};

    bv_policy *p = NULL;
    bv_error err;
    bv_error_clear(&err);
    if (bv_policy_load(path, params, sizeof params / sizeof params[0], &lim, &p, &err) != BV_OK)
        return 0;
    static const char *const events[] = {"train_begin", "epoch_end", "epoch_end"};
    for (size_t e = 0; e < sizeof events / sizeof events[0]; e++) {
        bv_policy_actions act;
        (void)bv_policy_has_handler(p, events[e]);
        if (bv_policy_call(p, events[e], metrics, sizeof metrics / sizeof metrics[0], &act,
                           &err) == BV_OK) {
            /* Everything the actions hold must be readable and terminated. */
            size_t sum = strlen(act.reason);
            for (size_t i = 0; i < act.nsets && i < BV_POLICY_MAX_SETS; i++)
                sum += strlen(act.sets[i].name);
            if (act.nsets > BV_POLICY_MAX_SETS) {
                fprintf(stderr, "bv_policy_call returned %zu sets\n", act.nsets);
                abort();
            }
            (void)sum;
        }
    }
    (void)bv_policy_path(p);
    bv_policy_free(p);
    return 0;
}
