/* Metrics series: a plugin (or the core) reports a named number with a unit, from any
 * thread, at any time; the training loop writes what was reported into metrics.jsonl at
 * the end of the unit (epoch or step) and `bivouac plot`/`compare` draw it like any other
 * series, one panel per unit. ABI 1.6 (docs/plugins.md, "Reporting series"). */
#ifndef BIVOUAC_SERIES_H
#define BIVOUAC_SERIES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Longest name and unit kept (longer ones are cut); a name is what a policy or plot
 * refers to ("queue_depth"), a unit what the axis says ("tasks", "s", "USD"). */
#define BV_SERIES_NAME_MAX 48
#define BV_SERIES_UNIT_MAX 24

/* Reports value for series name in unit (NULL or "": no unit). Thread-safe and cheap (a
 * mutex and a copy); a value reported twice in one unit keeps the last. Non-finite
 * values are written as null. Names are letters, digits, '_' and '.'; others are refused
 * with a warning, once per name. */
void bv_series_report(const char *name, const char *unit, double value);

#ifdef __cplusplus
}
#endif
#endif
