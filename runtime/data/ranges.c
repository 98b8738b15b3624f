/*
 * The memory registered with a runtime, so that registering bytes that a
 * registered handle already covers is refused (TDM_ERR_OVERLAP): two
 * handles over the same bytes would each track its own dependencies, and
 * tasks through them would race (a lost update, reported as success).
 *
 * Each registered handle spans [lo, hi): from its first byte to the end
 * of its last row. The spans live in an interval tree: a treap (Seidel and
 * Aragon, "Randomized search trees", Algorithmica 16, 1996) ordered by lo,
 * each node also holding the largest hi of its subtree (Cormen et al.,
 * "Introduction to Algorithms", 14.3), so that the spans meeting a new
 * one are found in O(log n) expected time plus one step per span found.
 *
 * Spans that meet are not always bytes that meet: the left and right
 * halves of a row-major matrix, registered apart, interleave row by row.
 * So a span found is then checked row by row (bytes_meet), which is exact.
 * Tiles of a partitioned matrix are not in the tree: they are the
 * matrix's, by design.
 */
#include "data.h"

/* A buffer's bytes as rows: `rows` runs of `width` bytes, `pitch` apart
 * from `base`; one run when they are contiguous. */
typedef struct {
  uintptr_t base, pitch, width;
  size_t rows;
} layout;

static layout layout_of(const tdm_buffer *b) {
  layout l = {(uintptr_t)b->ptr, b->ld * b->elem_size, b->ny * b->elem_size, b->nx};
  if (b->nx == 1 || b->ld == b->ny) {
    l.width = b->nx * b->ny * b->elem_size;
    l.pitch = l.width;
    l.rows = 1;
  }
  return l;
}

/* Whether two layouts share a byte: for each run of the one with fewer
 * runs, the other's last run starting before its end must end before its
 * start (runs do not overlap one another: pitch >= width). */
static bool bytes_meet(const tdm_buffer *bx, const tdm_buffer *by) {
  layout x = layout_of(bx), y = layout_of(by);
  if (x.rows > y.rows) {
    layout t = x;
    x = y;
    y = t;
  }
  for (size_t r = 0; r < x.rows; r++) {
    uintptr_t s = x.base + r * x.pitch, e = s + x.width;
    if (e <= y.base)
      continue;
    uintptr_t k = (e - 1 - y.base) / y.pitch;
    if (k >= y.rows)
      k = y.rows - 1;
    if (y.base + k * y.pitch + y.width > s)
      return true;
  }
  return false;
}

bool tdm__buffer_span(const tdm_buffer *b, uintptr_t *lo, uintptr_t *hi) {
  size_t elems, bytes;
  /* ((nx - 1) * ld + ny) * elem_size, and base + bytes, without wrapping */
  if (__builtin_mul_overflow(b->nx - 1, b->ld, &elems) ||
      __builtin_add_overflow(elems, b->ny, &elems) ||
      __builtin_mul_overflow(elems, b->elem_size, &bytes) ||
      __builtin_add_overflow((uintptr_t)b->ptr, bytes, hi))
    return false;
  *lo = (uintptr_t)b->ptr;
  return true;
}

static uintptr_t max_hi(const tdm_memrange *n) {
  return n ? n->max_hi : 0;
}

static void fix(tdm_memrange *n) {
  uintptr_t m = n->hi, l = max_hi(n->left), r = max_hi(n->right);
  n->max_hi = m > l ? (m > r ? m : r) : (l > r ? l : r);
}

static bool before(const tdm_memrange *a, const tdm_memrange *b) {
  return a->lo < b->lo || (a->lo == b->lo && (uintptr_t)a < (uintptr_t)b);
}

static tdm_memrange *rotate_right(tdm_memrange *n) {
  tdm_memrange *l = n->left;
  n->left = l->right;
  l->right = n;
  fix(n);
  fix(l);
  return l;
}

static tdm_memrange *rotate_left(tdm_memrange *n) {
  tdm_memrange *r = n->right;
  n->right = r->left;
  r->left = n;
  fix(n);
  fix(r);
  return r;
}

static tdm_memrange *insert(tdm_memrange *n, tdm_memrange *x) {
  if (!n)
    return x;
  if (before(x, n)) {
    n->left = insert(n->left, x);
    if (n->left->prio > n->prio)
      return rotate_right(n);
  } else {
    n->right = insert(n->right, x);
    if (n->right->prio > n->prio)
      return rotate_left(n);
  }
  fix(n);
  return n;
}

static tdm_memrange *remove_node(tdm_memrange *n, tdm_memrange *x) {
  if (!n)
    return NULL;
  if (n == x) {
    if (!n->left || !n->right)
      return n->left ? n->left : n->right;
    /* the child of higher priority takes its place; x goes down */
    if (n->left->prio > n->right->prio) {
      n = rotate_right(n);
      n->right = remove_node(n->right, x);
    } else {
      n = rotate_left(n);
      n->left = remove_node(n->left, x);
    }
  } else if (before(x, n)) {
    n->left = remove_node(n->left, x);
  } else {
    n->right = remove_node(n->right, x);
  }
  fix(n);
  return n;
}

static tdm_memrange *find(tdm_memrange *n, uintptr_t lo, uintptr_t hi, const tdm_buffer *b) {
  if (!n || n->max_hi <= lo)
    return NULL; /* nothing below ends after lo */
  tdm_memrange *r = find(n->left, lo, hi, b);
  if (r)
    return r;
  if (n->lo >= hi)
    return NULL; /* n and everything to its right start at or after hi */
  if (n->hi > lo && bytes_meet(n->buf, b))
    return n;
  return find(n->right, lo, hi, b);
}

tdm_memrange *tdm__ranges_find(const tdm_ranges *t, const tdm_buffer *b) {
  uintptr_t lo, hi;
  if (!tdm__buffer_span(b, &lo, &hi))
    return NULL;
  return find(t->root, lo, hi, b);
}

void tdm__ranges_insert(tdm_ranges *t, tdm_memrange *x, const tdm_buffer *b) {
  /* xorshift64 (Marsaglia 2003): priorities need only look random */
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  tdm__buffer_span(b, &x->lo, &x->hi); /* checked at registration */
  x->buf = b;
  x->prio = (uint32_t)(t->rng >> 32);
  x->left = x->right = NULL;
  x->max_hi = x->hi;
  t->root = insert(t->root, x);
}

void tdm__ranges_remove(tdm_ranges *t, tdm_memrange *x) {
  t->root = remove_node(t->root, x);
  x->buf = NULL;
}
