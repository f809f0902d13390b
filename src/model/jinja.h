/* jinja.h — kiln's own interpreter for the subset of Jinja that chat
 * templates use (tokenizer.chat_template in GGUF files).
 *
 * Covered: text, {{ }}, {% %}, {# #}, whitespace control (-), and the
 * trim_blocks + lstrip_blocks settings Hugging Face renders chat templates
 * with; if/elif/else, for (loop.index, index0, first, last, length,
 * revindex; "for a, b in", "for x in xs if c", else, break, continue), set
 * (name and namespace attribute); literals, lists, dicts, attributes,
 * subscripts and slices, arithmetic, ~, comparisons, in, and/or/not,
 * x if c else y; filters (trim, length, upper, lower, tojson, string,
 * default, first, last, join, list, items, capitalize, title, replace, int,
 * float, abs, reverse, selectattr, rejectattr, map(attribute=)); tests
 * (defined, undefined, none, string, number, integer, float, boolean,
 * mapping, iterable, sequence, true, false, odd, even, equalto); the
 * string methods strip, lstrip, rstrip, startswith, endswith, split, upper,
 * lower, title, replace, and dict get, items, keys, values; raise_exception,
 * namespace, range, strftime_now.
 *
 * Invariants: a render is a pure function of the template and the context
 * (strftime_now aside); any template, however malformed or hostile, ends
 * with output or an error message, bounded in time and memory.
 */
#ifndef KILN_JINJA_H
#define KILN_JINJA_H

#include <stddef.h>

#include "kiln.h"

typedef struct jinja_ctx jinja_ctx;

jinja_ctx *jinja_ctx_new(void);
void jinja_ctx_free(jinja_ctx *c);
void jinja_set_str(jinja_ctx *c, const char *name, const char *value);
void jinja_set_bool(jinja_ctx *c, const char *name, int value);
/* name = a list of n dicts, record i mapping keys[k] to vals[i * nk + k]
 * (a NULL value leaves that key out of the record) */
void jinja_set_records(jinja_ctx *c, const char *name, const char *const *keys, int nk, const char *const *vals,
                       int n);

/* render the n bytes of tmpl; on KILN_OK *out is malloc'd and NUL-terminated */
kiln_status jinja_render(const char *tmpl, size_t n, const jinja_ctx *c, char **out, char *err, size_t errlen);

#endif
