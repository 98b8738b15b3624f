/*
 * A strict JSON reader (RFC 8259) for tandem-trace and the tests: parses a
 * whole document into a tree, or fails on anything that is not JSON
 * (trailing commas, unquoted keys, bad escapes, control characters in
 * strings, leading zeros, text after the value...). Small and simple
 * rather than fast; header-only, every function static.
 */
#ifndef TDM_JSON_H
#define TDM_JSON_H

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json {
  json_type type;
  int boolean;
  double number;
  char *string;        /* JSON_STRING: the decoded text (UTF-8) */
  struct json **items; /* JSON_ARRAY and JSON_OBJECT: the values */
  char **keys;         /* JSON_OBJECT: the keys */
  size_t n;
} json;

typedef struct {
  const char *p;
  int depth;
} json_parser;

static void json_free(json *v) {
  if (!v)
    return;
  for (size_t i = 0; i < v->n; i++) {
    json_free(v->items[i]);
    if (v->keys)
      free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->string);
  free(v);
}

static void json_ws(json_parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
    ps->p++;
}

static int json_hex4(const char *p, unsigned *out) {
  *out = 0;
  for (int i = 0; i < 4; i++) {
    if (!isxdigit((unsigned char)p[i]))
      return -1;
    *out = *out * 16 + (unsigned)(isdigit((unsigned char)p[i]) ? p[i] - '0'
                                                                : (tolower((unsigned char)p[i]) - 'a' + 10));
  }
  return 0;
}

/* Appends code point c as UTF-8. */
static size_t json_utf8(char *out, unsigned c) {
  if (c < 0x80) {
    out[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    out[0] = (char)(0xc0 | c >> 6);
    out[1] = (char)(0x80 | (c & 0x3f));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = (char)(0xe0 | c >> 12);
    out[1] = (char)(0x80 | (c >> 6 & 0x3f));
    out[2] = (char)(0x80 | (c & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | c >> 18);
  out[1] = (char)(0x80 | (c >> 12 & 0x3f));
  out[2] = (char)(0x80 | (c >> 6 & 0x3f));
  out[3] = (char)(0x80 | (c & 0x3f));
  return 4;
}

/* A string at ps->p (on its opening quote); NULL when malformed. */
static char *json_string_at(json_parser *ps) {
  if (*ps->p != '"')
    return NULL;
  const char *p = ps->p + 1;
  /* decoded text is never longer than the source */
  char *out = malloc(strlen(p) + 1), *o = out;
  if (!out)
    return NULL;
  for (;;) {
    unsigned char c = (unsigned char)*p;
    if (c == '"')
      break;
    if (c < 0x20) /* includes the end of the text */
      goto bad;
    if (c != '\\') {
      *o++ = (char)c;
      p++;
      continue;
    }
    p++;
    switch (*p) {
    case '"': case '\\': case '/':
      *o++ = *p;
      break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp, lo;
      if (json_hex4(p + 1, &cp))
        goto bad;
      p += 4;
      if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
        if (p[1] != '\\' || p[2] != 'u' || json_hex4(p + 3, &lo) || lo < 0xdc00 || lo > 0xdfff)
          goto bad;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p += 6;
      } else if (cp >= 0xdc00 && cp < 0xe000) {
        goto bad;
      }
      o += json_utf8(o, cp);
      break;
    }
    default:
      goto bad;
    }
    p++;
  }
  *o = 0;
  ps->p = p + 1;
  return out;
bad:
  free(out);
  return NULL;
}

static json *json_value(json_parser *ps);

static int json_push(json *v, json *item, char *k) {
  json **items = realloc(v->items, (v->n + 1) * sizeof *items);
  if (!items)
    return -1;
  v->items = items;
  if (v->type == JSON_OBJECT) {
    char **keys = realloc(v->keys, (v->n + 1) * sizeof *keys);
    if (!keys)
      return -1;
    v->keys = keys;
    keys[v->n] = k;
  }
  items[v->n++] = item;
  return 0;
}

static json *json_container(json_parser *ps, json *v) {
  char close = v->type == JSON_ARRAY ? ']' : '}';
  ps->p++;
  json_ws(ps);
  if (*ps->p == close) {
    ps->p++;
    return v;
  }
  for (;;) {
    char *k = NULL;
    json_ws(ps);
    if (v->type == JSON_OBJECT) {
      if (!(k = json_string_at(ps)))
        goto bad;
      json_ws(ps);
      if (*ps->p++ != ':') {
        free(k);
        goto bad;
      }
    }
    json *item = json_value(ps);
    if (!item || json_push(v, item, k)) {
      json_free(item);
      free(k);
      goto bad;
    }
    json_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p++ == close)
      return v;
    goto bad;
  }
bad:
  json_free(v);
  return NULL;
}

static json *json_number(json_parser *ps, json *v) {
  const char *p = ps->p, *start = p;
  if (*p == '-')
    p++;
  if (*p == '0')
    p++;
  else if (*p >= '1' && *p <= '9')
    while (isdigit((unsigned char)*p))
      p++;
  else
    goto bad;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      goto bad;
    while (isdigit((unsigned char)*p))
      p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-')
      p++;
    if (!isdigit((unsigned char)*p))
      goto bad;
    while (isdigit((unsigned char)*p))
      p++;
  }
  v->number = strtod(start, NULL);
  ps->p = p;
  return v;
bad:
  json_free(v);
  return NULL;
}

static json *json_value(json_parser *ps) {
  if (++ps->depth > 64)
    return NULL;
  json_ws(ps);
  json *v = calloc(1, sizeof *v);
  if (!v)
    return NULL;
  json *r = v;
  if (*ps->p == '{') {
    v->type = JSON_OBJECT;
    r = json_container(ps, v);
  } else if (*ps->p == '[') {
    v->type = JSON_ARRAY;
    r = json_container(ps, v);
  } else if (*ps->p == '"') {
    v->type = JSON_STRING;
    if (!(v->string = json_string_at(ps))) {
      json_free(v);
      r = NULL;
    }
  } else if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
    v->type = JSON_BOOL;
    v->boolean = *ps->p == 't';
    ps->p += v->boolean ? 4 : 5;
  } else if (!strncmp(ps->p, "null", 4)) {
    v->type = JSON_NULL;
    ps->p += 4;
  } else {
    v->type = JSON_NUMBER;
    r = json_number(ps, v);
  }
  ps->depth--;
  return r;
}

/* Parses a whole document; NULL when it is not exactly one JSON value. */
static json *json_parse(const char *text) {
  json_parser ps = {text, 0};
  json *v = json_value(&ps);
  if (!v)
    return NULL;
  json_ws(&ps);
  if (*ps.p) {
    json_free(v);
    return NULL;
  }
  return v;
}

/* The member `key` of an object, or NULL. */
static json *json_get(const json *obj, const char *key) {
  if (!obj || obj->type != JSON_OBJECT)
    return NULL;
  for (size_t i = 0; i < obj->n; i++)
    if (!strcmp(obj->keys[i], key))
      return obj->items[i];
  return NULL;
}

#endif
