/* Checked conversions of command-line values (cli.h): the whole text must be a number
 * inside the flag's stated range, so that no cast from double to integer is ever out of
 * range and no typo (`--tokens 1e19`, `--seed 12x`) is taken for something else. */
#include <errno.h>
#include <stdlib.h>

#include "cli.h"

/* strtoll and strtod skip leading white space, and strtod reads hex, "inf" and "nan": a
 * flag's value is a plain decimal, an optional sign and then a digit (or ".5"). */
static bool is_decimal_start(const char *text)
{
    const char *p = text + (*text == '-' || *text == '+');
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return false;
    return (*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9');
}

int bv_cli_int_arg(const char *flag, const char *text, long long min, long long max,
                   long long *out)
{
    char *end = NULL;
    long long v = 0;
    errno = 0;
    if (is_decimal_start(text))
        v = strtoll(text, &end, 10);
    if (!end || *end || errno || v < min || v > max)
        return bv_cli_fail(BV_EXIT_USAGE, "%s needs an integer in [%lld, %lld], got '%s'", flag,
                           min, max, text);
    *out = v;
    return 0;
}

int bv_cli_override_arg(char *text, char **list, size_t *n, size_t max)
{
    if (*n == max)
        return bv_cli_fail(BV_EXIT_USAGE, "too many -s overrides");
    list[(*n)++] = text;
    return 0;
}

int bv_cli_number_arg(const char *flag, const char *text, double min, double max, double *out)
{
    char *end = NULL;
    double v = 0;
    errno = 0;
    if (is_decimal_start(text))
        v = strtod(text, &end);
    if (!end || *end || errno || !(v >= min && v <= max))
        return bv_cli_fail(BV_EXIT_USAGE, "%s needs a number in [%g, %g], got '%s'", flag, min,
                           max, text);
    *out = v;
    return 0;
}
