/* strata-agent's tools; see agent_tools.h. */
#if !defined(_WIN32)
#define _XOPEN_SOURCE 700 /* realpath */
#endif
#include "agent_tools.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fail(char *out, size_t cap, const char *fmt, ...) {
  va_list ap;
  int n = snprintf(out, cap, "error: ");
  va_start(ap, fmt);
  if (n >= 0 && (size_t)n < cap) vsnprintf(out + n, cap - (size_t)n, fmt, ap);
  va_end(ap);
  return 1;
}

/* %.12g without a negative zero. */
static void format_number(double v, char *buf, size_t cap) {
  snprintf(buf, cap, "%.12g", v);
  if (strcmp(buf, "-0") == 0) snprintf(buf, cap, "0");
}

/* ------------------------------------------------------------------------ */
/* calculator: recursive descent over the expression text. */

typedef struct {
  const char *s;
  const char *error; /* first error, static text */
  char detail[64];
} Calc;

static void skip_space(Calc *c) {
  while (*c->s == ' ' || *c->s == '\t') c->s++;
}

/* The next token's first character without consuming it (0 at the end). */
static char peek(Calc *c) {
  skip_space(c);
  return *c->s;
}

static double expression(Calc *c);

static double primary(Calc *c) {
  char ch = peek(c);
  if (c->error) return 0;
  if (ch == '-') {
    c->s++;
    return -primary(c);
  }
  if (ch == '(') {
    double v;
    c->s++;
    v = expression(c);
    if (c->error) return 0;
    if (peek(c) != ')') {
      c->error = "missing )";
      return 0;
    }
    c->s++;
    return v;
  }
  if (isdigit((unsigned char)ch) || ch == '.') {
    const char *b = c->s;
    int dots = 0;
    char buf[64];
    size_t n;
    while (isdigit((unsigned char)*c->s) || *c->s == '.') dots += *c->s++ == '.';
    n = (size_t)(c->s - b);
    if (dots > 1 || (n == 1 && *b == '.') || n >= sizeof(buf)) {
      snprintf(c->detail, sizeof(c->detail), "bad number '%.*s'", (int)(n < 40 ? n : 40), b);
      c->error = c->detail;
      return 0;
    }
    memcpy(buf, b, n);
    buf[n] = '\0';
    return strtod(buf, NULL);
  }
  if (ch == '\0' || ch == ')' || strchr("+*/", ch) != NULL) {
    c->error = "expected a number";
  } else {
    snprintf(c->detail, sizeof(c->detail), "unexpected '%c'", ch);
    c->error = c->detail;
  }
  return 0;
}

static double term(Calc *c) {
  double v = primary(c);
  while (!c->error && (peek(c) == '*' || peek(c) == '/')) {
    char op = *c->s++;
    double r = primary(c);
    if (c->error) return 0;
    if (op == '*') {
      v = v * r;
    } else if (r == 0) {
      c->error = "division by zero";
      return 0;
    } else {
      v = v / r;
    }
  }
  return v;
}

static double expression(Calc *c) {
  double v = term(c);
  while (!c->error && (peek(c) == '+' || peek(c) == '-')) {
    char op = *c->s++;
    double r = term(c);
    if (c->error) return 0;
    v = op == '+' ? v + r : v - r;
  }
  return v;
}

int agent_calculate(const char *text, char *out, size_t cap) {
  Calc c;
  double v;
  const char *p;
  memset(&c, 0, sizeof(c));
  c.s = text;
  /* Characters outside the grammar are reported first, as tools.py's
   * tokenizer does before parsing. */
  for (p = text; *p; ++p) {
    if (!(isdigit((unsigned char)*p) || strchr(" \t+-*/().", *p) != NULL)) {
      return fail(out, cap, "unexpected '%c'", *p);
    }
    if (*p == '.' || isdigit((unsigned char)*p)) {
      const char *b = p;
      int dots = 0;
      while (isdigit((unsigned char)*p) || *p == '.') dots += *p++ == '.';
      if (dots > 1 || (p - b == 1 && *b == '.')) {
        return fail(out, cap, "bad number '%.*s'", (int)(p - b < 40 ? p - b : 40), b);
      }
      --p;
    }
  }
  if (peek(&c) == '\0') return fail(out, cap, "empty expression");
  v = expression(&c);
  if (!c.error && peek(&c) != '\0') c.error = "unexpected input after the expression";
  if (c.error) return fail(out, cap, "%s", c.error);
  format_number(v, out, cap);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* convert_units */

typedef struct {
  const char *unit;
  const char *kind;
  double factor; /* to m, kg or l; 0 for temperatures */
} Unit;

static const Unit kUnits[] = {
    {"mm", "length", 0.001}, {"cm", "length", 0.01},     {"m", "length", 1.0},
    {"km", "length", 1000.0}, {"in", "length", 0.0254},  {"ft", "length", 0.3048},
    {"mi", "length", 1609.344}, {"g", "mass", 0.001},    {"kg", "mass", 1.0},
    {"lb", "mass", 0.45359237}, {"oz", "mass", 0.028349523125},
    {"ml", "volume", 0.001},  {"l", "volume", 1.0},      {"gal", "volume", 3.785411784},
    {"C", "temperature", 0},  {"F", "temperature", 0},   {"K", "temperature", 0},
};

static const Unit *find_unit(const char *u) {
  size_t i;
  for (i = 0; i < sizeof(kUnits) / sizeof(kUnits[0]); ++i) {
    if (strcmp(kUnits[i].unit, u) == 0) return &kUnits[i];
  }
  return NULL;
}

int agent_convert_units(double value, const char *from, const char *to, char *out, size_t cap) {
  const Unit *f = find_unit(from), *t = find_unit(to);
  double r;
  char v[64];
  if (f == NULL || t == NULL) return fail(out, cap, "unknown unit '%s'", f == NULL ? from : to);
  if (strcmp(f->kind, t->kind) != 0) return fail(out, cap, "cannot convert %s to %s", f->kind, t->kind);
  if (f->factor == 0) {
    /* Same operation order as tools.py so the doubles agree bit for bit. */
    double c = f->unit[0] == 'C' ? value : f->unit[0] == 'F' ? (value - 32) * 5 / 9 : value - 273.15;
    r = t->unit[0] == 'C' ? c : t->unit[0] == 'F' ? c * 9 / 5 + 32 : c + 273.15;
  } else {
    r = value * f->factor / t->factor;
  }
  format_number(value, v, sizeof(v));
  snprintf(out, cap, "%s %s = %.6g %s", v, from, r, to);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* lookup_element */

typedef struct {
  const char *name, *symbol;
  int number;
  const char *mass;
} Element;

static const Element kElements[] = {
    {"Hydrogen", "H", 1, "1.008"},      {"Helium", "He", 2, "4.0026"},
    {"Lithium", "Li", 3, "6.94"},       {"Carbon", "C", 6, "12.011"},
    {"Nitrogen", "N", 7, "14.007"},     {"Oxygen", "O", 8, "15.999"},
    {"Neon", "Ne", 10, "20.180"},       {"Sodium", "Na", 11, "22.990"},
    {"Magnesium", "Mg", 12, "24.305"},  {"Aluminium", "Al", 13, "26.982"},
    {"Silicon", "Si", 14, "28.085"},    {"Sulfur", "S", 16, "32.06"},
    {"Chlorine", "Cl", 17, "35.45"},    {"Potassium", "K", 19, "39.098"},
    {"Calcium", "Ca", 20, "40.078"},    {"Iron", "Fe", 26, "55.845"},
    {"Copper", "Cu", 29, "63.546"},     {"Zinc", "Zn", 30, "65.38"},
    {"Silver", "Ag", 47, "107.87"},     {"Tin", "Sn", 50, "118.71"},
    {"Gold", "Au", 79, "196.97"},       {"Mercury", "Hg", 80, "200.59"},
    {"Lead", "Pb", 82, "207.2"},        {"Uranium", "U", 92, "238.03"},
};

static int equal_ignoring_case(const char *a, const char *b) {
  while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) ++a, ++b;
  return *a == '\0' && *b == '\0';
}

int agent_lookup_element(const char *name, char *out, size_t cap) {
  char key[64];
  size_t i, n;
  const char *b = name;
  while (isspace((unsigned char)*b)) ++b;
  n = strlen(b);
  while (n > 0 && isspace((unsigned char)b[n - 1])) --n;
  if (n >= sizeof(key)) n = sizeof(key) - 1;
  memcpy(key, b, n);
  key[n] = '\0';
  for (i = 0; i < sizeof(kElements) / sizeof(kElements[0]); ++i) {
    const Element *e = &kElements[i];
    if (equal_ignoring_case(key, e->name) || equal_ignoring_case(key, e->symbol)) {
      snprintf(out, cap, "name: %s, symbol: %s, atomic number: %d, atomic mass: %s", e->name,
               e->symbol, e->number, e->mass);
      return 0;
    }
  }
  return fail(out, cap, "no element named '%s'", name);
}

/* ------------------------------------------------------------------------ */
/* sandbox files */

/* Joins sandbox and the normalised relative path ("" for the top) into full;
 * 0 when the path leaves the sandbox or does not fit. */
static int sandbox_path(const char *sandbox, const char *path, char *rel, size_t rel_cap,
                        char *full, size_t full_cap) {
  const char *p = path;
  size_t n = 0;
  char resolved_box[PATH_MAX], resolved[PATH_MAX];
  rel[0] = '\0';
  if (*p == '/') return 0;
  while (*p) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
    if (len > 0 && !(len == 1 && p[0] == '.')) {
      if (n + len + 2 > rel_cap) return 0;
      if (n > 0) rel[n++] = '/';
      memcpy(rel + n, p, len);
      n += len;
      rel[n] = '\0';
    }
    p += len;
    if (*p == '/') ++p;
  }
  if ((size_t)snprintf(full, full_cap, "%s/%s", sandbox, rel) >= full_cap) return 0;
  /* A symbolic link must not lead out of the sandbox either. */
  if (realpath(sandbox, resolved_box) == NULL) return 0;
  if (realpath(full, resolved) != NULL) {
    size_t b = strlen(resolved_box);
    if (strncmp(resolved, resolved_box, b) != 0 || (resolved[b] != '\0' && resolved[b] != '/')) {
      return 0;
    }
  }
  return 1;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int agent_list_files(const char *sandbox, const char *path, char *out, size_t cap) {
  char rel[1024], full[PATH_MAX + 1100];
  DIR *d;
  struct dirent *ent;
  char *names[512];
  size_t count = 0, i, used = 0;
  if (!sandbox_path(sandbox, path, rel, sizeof(rel), full, sizeof(full))) {
    return fail(out, cap, "path outside the sandbox");
  }
  d = opendir(full);
  if (d == NULL) return fail(out, cap, "no such directory: %s", path);
  while ((ent = readdir(d)) != NULL && count < sizeof(names) / sizeof(names[0])) {
    char child[PATH_MAX + 1400];
    struct stat st;
    size_t len = strlen(ent->d_name);
    if (ent->d_name[0] == '.') continue; /* ".", ".." and hidden files */
    snprintf(child, sizeof(child), "%s/%s", full, ent->d_name);
    names[count] = (char *)malloc(len + 2);
    if (names[count] == NULL) break;
    memcpy(names[count], ent->d_name, len + 1);
    if (stat(child, &st) == 0 && S_ISDIR(st.st_mode)) memcpy(names[count] + len, "/", 2);
    ++count;
  }
  closedir(d);
  if (count == 0) return fail(out, cap, "no such directory: %s", path);
  qsort(names, count, sizeof(names[0]), compare_names);
  out[0] = '\0';
  for (i = 0; i < count; ++i) {
    int n = snprintf(out + used, used < cap ? cap - used : 0, "%s%s", i ? "\n" : "", names[i]);
    if (n > 0) used += (size_t)n;
    if (used >= cap) used = cap - 1;
    free(names[i]);
  }
  return 0;
}

int agent_read_file(const char *sandbox, const char *path, char *out, size_t cap) {
  char rel[1024], full[PATH_MAX + 1100];
  FILE *f;
  size_t n;
  struct stat st;
  if (!sandbox_path(sandbox, path, rel, sizeof(rel), full, sizeof(full))) {
    return fail(out, cap, "path outside the sandbox");
  }
  if (stat(full, &st) != 0 || !S_ISREG(st.st_mode) || (f = fopen(full, "rb")) == NULL) {
    return fail(out, cap, "no such file: %s", path);
  }
  n = fread(out, 1, cap - 1, f);
  fclose(f);
  out[n] = '\0';
  /* tools.py holds file texts without a trailing newline; files written by
   * editors end with one. */
  while (n > 0 && out[n - 1] == '\n') out[--n] = '\0';
  return 0;
}

/* ------------------------------------------------------------------------ */
/* a flat-object JSON getter */

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  return p;
}

/* Reads a JSON string at p (at its opening quote) into out (may be NULL);
 * returns the position after it, or NULL. \uXXXX escapes of the BMP become UTF-8. */
static const char *read_string(const char *p, char *out, size_t cap) {
  size_t n = 0;
  if (*p != '"') return NULL;
  ++p;
  while (*p && *p != '"') {
    unsigned c = (unsigned char)*p++;
    char buf[4];
    size_t len = 1;
    buf[0] = (char)c;
    if (c == '\\') {
      c = (unsigned char)*p++;
      switch (c) {
        case 'n': buf[0] = '\n'; break;
        case 't': buf[0] = '\t'; break;
        case 'r': buf[0] = '\r'; break;
        case 'b': buf[0] = '\b'; break;
        case 'f': buf[0] = '\f'; break;
        case 'u': {
          unsigned v = 0;
          int i;
          for (i = 0; i < 4; ++i) {
            char h = *p++;
            v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
          }
          if (v < 0x80) {
            buf[0] = (char)v;
          } else if (v < 0x800) {
            buf[0] = (char)(0xC0 | (v >> 6));
            buf[1] = (char)(0x80 | (v & 0x3F));
            len = 2;
          } else {
            buf[0] = (char)(0xE0 | (v >> 12));
            buf[1] = (char)(0x80 | ((v >> 6) & 0x3F));
            buf[2] = (char)(0x80 | (v & 0x3F));
            len = 3;
          }
          break;
        }
        case '\0': return NULL;
        default: buf[0] = (char)c; break;
      }
    }
    if (out != NULL && n + len < cap) {
      memcpy(out + n, buf, len);
      n += len;
    }
  }
  if (*p != '"') return NULL;
  if (out != NULL && cap > 0) out[n < cap ? n : cap - 1] = '\0';
  return p + 1;
}

/* Skips one JSON value; returns the position after it, or NULL. */
static const char *skip_value(const char *p) {
  int depth = 0;
  p = skip_ws(p);
  if (*p == '"') return read_string(p, NULL, 0);
  do {
    if (*p == '\0') return NULL;
    if (*p == '"') {
      p = read_string(p, NULL, 0);
      if (p == NULL) return NULL;
      continue;
    }
    if (*p == '{' || *p == '[') ++depth;
    if (*p == '}' || *p == ']') {
      if (depth == 0) return p;
      --depth;
    }
    if (depth == 0 && *p == ',') return p;
    ++p;
  } while (depth > 0 || (*p != ',' && *p != '}' && *p != ']' && *p != '\0'));
  return p;
}

int agent_json_get(const char *json, const char *key, char *out, size_t cap) {
  const char *p = skip_ws(json);
  char name[128];
  if (*p != '{') return 0;
  p = skip_ws(p + 1);
  while (*p == '"') {
    const char *v;
    p = read_string(p, name, sizeof(name));
    if (p == NULL) return 0;
    p = skip_ws(p);
    if (*p != ':') return 0;
    v = skip_ws(p + 1);
    if (strcmp(name, key) == 0) {
      if (*v == '"') return read_string(v, out, cap) != NULL ? 1 : 0;
      p = skip_value(v);
      if (p == NULL) return 0;
      {
        size_t n = (size_t)(p - v);
        while (n > 0 && isspace((unsigned char)v[n - 1])) --n;
        if (n >= cap) n = cap - 1;
        memcpy(out, v, n);
        out[n] = '\0';
      }
      return 2;
    }
    p = skip_value(v);
    if (p == NULL) return 0;
    p = skip_ws(p);
    if (*p == ',') p = skip_ws(p + 1);
  }
  return 0;
}
