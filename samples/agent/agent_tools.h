/* The host tools of strata-agent: plain C99, no Strata types. Each writes a
 * NUL-terminated result into out[cap] (truncated to fit) and returns 0, or an
 * "error: ..." text and a nonzero code. The texts are byte for byte those of
 * tools/demo_model/tools.py, which generated the demo model's training data,
 * so the model reads in the app what it read in training. */
#ifndef STRATA_SAMPLES_AGENT_AGENT_TOOLS_H_
#define STRATA_SAMPLES_AGENT_AGENT_TOOLS_H_

#include <stddef.h>

/* calculator: + - * / and parentheses on decimal numbers (IEEE double,
 * left-associative, unary minus), printed with %.12g. */
int agent_calculate(const char *expression, char *out, size_t cap);

/* convert_units: length (mm cm m km in ft mi), mass (g kg lb oz), volume
 * (ml l gal), temperature (C F K). */
int agent_convert_units(double value, const char *from_unit, const char *to_unit, char *out,
                        size_t cap);

/* lookup_element: a row of a small table of chemical elements, by name or symbol. */
int agent_lookup_element(const char *name, char *out, size_t cap);

/* list_files / read_file inside `sandbox`: relative paths only, no "..", and
 * the resolved path must stay inside the sandbox (symbolic links included). */
int agent_list_files(const char *sandbox, const char *path, char *out, size_t cap);
int agent_read_file(const char *sandbox, const char *path, char *out, size_t cap);

/* The value of `key` in a flat JSON object (the canonical arguments Strata
 * hands a tool callback). Strings are unescaped into out; other values are
 * copied as written. Returns 1 for a string, 2 for another value, 0 when the
 * key is absent or the JSON is not an object. */
int agent_json_get(const char *json, const char *key, char *out, size_t cap);

#endif /* STRATA_SAMPLES_AGENT_AGENT_TOOLS_H_ */
