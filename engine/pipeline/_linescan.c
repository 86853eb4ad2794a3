/* The aggregated scan's per-line work (pipeline/scan.py, Scanner._aggregate_chunk) in compiled code,
 * against the Hyperscan library itself: the Python binding calls back into Python once per match,
 * which on a log where most lines are signature hits costs more than everything else.
 *
 * classify() copies a chunk with its Ray-prefixed and redrawn lines cut into segments (cut_chunk),
 * scans that once with the line matcher's database, groups the matches by line and settles
 * the lines the aggregated path only counts: every hit is a signature's whose tally keeps no more
 * records, confirmed as it stands, with no failure word, config key or unsound text on the line,
 * after a launcher prefix only when it is Ray's `(name pid=…)`, in carriage-return redraws only
 * when they are kept the way inputs/normalize.segments keeps them. Every other line is handed back
 * to Python with its ids, in line order, and takes the Python path exactly as before. What is
 * settled here is only counted (per signature: how many hits, and where the last one ends), so the
 * facts do not change: the equivalence tests compare this path with the full path.
 *
 * A call told to `defer` makes no Python call at all, so it can run in a thread while Python settles
 * an earlier chunk (Scanner.scan with threads): a line whose hit only Python can confirm is handed
 * back as deferred. Built with PCRE2, the module confirms most such hits itself.
 *
 * The rules here mirror scan.py (_may_have_prefix, _RAY_PID_PREFIX, _kept_redraws, _is_redraw,
 * _sort_line, _confirm, _count_hits); a change there must be made here too, and the equivalence
 * tests run both.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <hs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

/* Bits of the per-id flags scan.py passes (NATIVE_* there). */
#define F_SIMPLE 1    /* a confirmed hit counts without more checks (not gated, not distinct, kind ok) */
#define F_SATURATED 2 /* its tally keeps no more records (at the chunk's start) */
#define F_EXACT 4     /* the translation is exact */
#define F_ANCHORED 8  /* the pattern depends on where the text starts */
#define F_KINDSKIP 16 /* the signature does not apply to this kind of file */

/* Roles of the markers (pipeline/matcher.py). */
#define R_SLOW 1
#define R_CONFIG 2
#define R_REDRAWN 8

#define ID_BITS 11
#define ID_MASK ((1u << ID_BITS) - 1)

typedef struct {
    uint64_t *v;
    size_t n, cap;
} u64vec;

static int push(u64vec *a, uint64_t x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        uint64_t *grown = realloc(a->v, cap * sizeof *grown);
        if (grown == NULL)
            return -1;
        a->v = grown;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* Room for `need` items of `size` bytes in *items (doubling, from 4096); -1 when out of memory. */
static int reserve(void **items, size_t *room, size_t need, size_t size) {
    if (need <= *room)
        return 0;
    size_t grown_room = *room ? *room : 4096;
    while (grown_room < need)
        grown_room *= 2;
    void *grown = realloc(*items, grown_room * size);
    if (grown == NULL)
        return -1;
    *items = grown;
    *room = grown_room;
    return 0;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Hits come nearly sorted (a hit is moved from where its match ends to its line's end, so only hits
 * of one line are out of place): an insertion sort, which gives way to qsort when the data is far
 * from sorted. */
static void sort_u64(u64vec *a) {
    size_t moves = 0, limit = 4 * a->n + 64;
    for (size_t i = 1; i < a->n; i++) {
        uint64_t x = a->v[i];
        size_t j = i;
        while (j > 0 && a->v[j - 1] > x) {
            a->v[j] = a->v[j - 1];
            j--;
            if (++moves > limit) {
                a->v[j] = x;
                qsort(a->v, a->n, sizeof *a->v, compare_u64);
                return;
            }
        }
        a->v[j] = x;
    }
}

/* ---- the database and its scratch ---- */

typedef struct {
    PyObject_HEAD hs_database_t *db;
} DatabaseObject;

typedef struct {
    PyObject_HEAD hs_scratch_t *scratch;
    /* classify's buffers, kept from one call to the next (a scratch serves one thread at a time):
     * the chunk as it is scanned, and its hits */
    unsigned char *text;
    size_t text_room;
    uint64_t *hits;
    size_t hits_room;
} ScratchObject;

static PyObject *HyperscanError;

static void database_dealloc(DatabaseObject *self) {
    if (self->db != NULL)
        hs_free_database(self->db);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void scratch_dealloc(ScratchObject *self) {
    if (self->scratch != NULL)
        hs_free_scratch(self->scratch);
    free(self->text);
    free(self->hits);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *database_dumps(DatabaseObject *self, PyObject *Py_UNUSED(ignored)) {
    char *bytes = NULL;
    size_t length = 0;
    if (hs_serialize_database(self->db, &bytes, &length) != HS_SUCCESS)
        return PyErr_Format(HyperscanError, "the database could not be serialised");
    PyObject *out = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)length);
    free(bytes);
    return out;
}

static PyTypeObject ScratchType;

static PyObject *database_scratch(DatabaseObject *self, PyObject *Py_UNUSED(ignored)) {
    ScratchObject *out = PyObject_New(ScratchObject, &ScratchType);
    if (out == NULL)
        return NULL;
    out->scratch = NULL;
    out->text = NULL;
    out->hits = NULL;
    out->text_room = out->hits_room = 0;
    if (hs_alloc_scratch(self->db, &out->scratch) != HS_SUCCESS) {
        Py_DECREF(out);
        return PyErr_Format(HyperscanError, "no scratch space for the database");
    }
    return (PyObject *)out;
}

static PyMethodDef database_methods[] = {
    {"dumps", (PyCFunction)database_dumps, METH_NOARGS, "The database as bytes, for loads()."},
    {"scratch", (PyCFunction)database_scratch, METH_NOARGS, "Scratch space for scanning with this database (one per thread)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DatabaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Database",
    .tp_basicsize = sizeof(DatabaseObject),
    .tp_dealloc = (destructor)database_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled Hyperscan database (block mode).",
    .tp_methods = database_methods,
};

static PyTypeObject ScratchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Scratch",
    .tp_basicsize = sizeof(ScratchObject),
    .tp_dealloc = (destructor)scratch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hyperscan scratch space: one thread scans with it at a time.",
};

static DatabaseObject *new_database(hs_database_t *db) {
    DatabaseObject *out = PyObject_New(DatabaseObject, &DatabaseType);
    if (out == NULL) {
        hs_free_database(db);
        return NULL;
    }
    out->db = db;
    return out;
}

static PyObject *compile_database(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *expressions, *flags;
    if (!PyArg_ParseTuple(args, "OO", &expressions, &flags))
        return NULL;
    PyObject *exprs = PySequence_Fast(expressions, "expressions must be a sequence of bytes");
    if (exprs == NULL)
        return NULL;
    PyObject *flag_seq = PySequence_Fast(flags, "flags must be a sequence of int");
    if (flag_seq == NULL) {
        Py_DECREF(exprs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(exprs);
    PyObject *result = NULL;
    const char **texts = NULL;
    unsigned int *flag_values = NULL, *ids = NULL;
    if (PySequence_Fast_GET_SIZE(flag_seq) != n || n == 0) {
        PyErr_SetString(PyExc_ValueError, "one flag per expression, and at least one expression");
        goto done;
    }
    texts = malloc(sizeof *texts * (size_t)n);
    flag_values = malloc(sizeof *flag_values * (size_t)n);
    ids = malloc(sizeof *ids * (size_t)n);
    if (texts == NULL || flag_values == NULL || ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(exprs, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "expressions must be bytes");
            goto done;
        }
        texts[i] = PyBytes_AS_STRING(item);
        unsigned long value = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(flag_seq, i));
        if (PyErr_Occurred())
            goto done;
        flag_values[i] = (unsigned int)value;
        ids[i] = (unsigned int)i;
    }
    hs_database_t *db = NULL;
    hs_compile_error_t *error = NULL;
    hs_error_t status;
    Py_BEGIN_ALLOW_THREADS status = hs_compile_multi(texts, flag_values, ids, (unsigned int)n, HS_MODE_BLOCK, NULL, &db, &error);
    Py_END_ALLOW_THREADS if (status != HS_SUCCESS) {
        if (error != NULL) {
            PyErr_Format(HyperscanError, "expression %d: %s", error->expression, error->message);
            hs_free_compile_error(error);
        } else {
            PyErr_Format(HyperscanError, "compiling failed (%d)", (int)status);
        }
        goto done;
    }
    result = (PyObject *)new_database(db);
done:
    free(texts);
    free(flag_values);
    free(ids);
    Py_DECREF(exprs);
    Py_DECREF(flag_seq);
    return result;
}

static PyObject *load_database(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *data;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "y#", &data, &length))
        return NULL;
    hs_database_t *db = NULL;
    if (hs_deserialize_database(data, (size_t)length, &db) != HS_SUCCESS)
        return PyErr_Format(HyperscanError, "not a database this library can load");
    return (PyObject *)new_database(db);
}

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) { return PyUnicode_FromString(hs_version()); }

/* ---- a signature's own pattern, with PCRE2 (built with it only) ----
 * For the few signatures no Hyperscan database states (a backreference, a lookahead): their hits
 * are confirmed with the pattern itself, which PCRE2 runs without Python, as Hyperscan's Chimera
 * pairs the two. matcher.py uses one only where the pattern means the same to PCRE2 as to Python's
 * regex on the text that reaches it (ASCII and block elements), checked on the signature's examples. */

#ifdef HAVE_PCRE2
typedef struct {
    PyObject_HEAD pcre2_code *code;
} PatternObject;

static void pattern_dealloc(PatternObject *self) {
    if (self->code != NULL)
        pcre2_code_free(self->code);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1: the pattern is found in the text; 0: not; -1: PCRE2 gave up (a limit, text that is not UTF-8). */
static int pattern_found(pcre2_code *code, pcre2_match_data *match, const unsigned char *text, size_t length) {
    int found = pcre2_match(code, (PCRE2_SPTR)text, (PCRE2_SIZE)length, 0, 0, match, NULL);
    return found >= 0 ? 1 : found == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

static PyObject *pattern_search(PatternObject *self, PyObject *args) {
    Py_buffer text;
    if (!PyArg_ParseTuple(args, "y*", &text))
        return NULL;
    pcre2_match_data *match = pcre2_match_data_create(1, NULL);
    if (match == NULL) {
        PyBuffer_Release(&text);
        return PyErr_NoMemory();
    }
    int found = pattern_found(self->code, match, text.buf, (size_t)text.len);
    pcre2_match_data_free(match);
    PyBuffer_Release(&text);
    if (found < 0)
        Py_RETURN_NONE;
    return PyBool_FromLong(found);
}

static PyMethodDef pattern_methods[] = {
    {"search", (PyCFunction)pattern_search, METH_VARARGS, "search(text: bytes) -> True, False, or None when PCRE2 gives up."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PatternType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rltriage.pipeline._linescan.Pattern",
    .tp_basicsize = sizeof(PatternObject),
    .tp_dealloc = (destructor)pattern_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pattern compiled by PCRE2 (UTF-8, JIT where the library has it).",
    .tp_methods = pattern_methods,
};

static PyObject *compile_pattern(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *text;
    Py_ssize_t length;
    int caseless;
    if (!PyArg_ParseTuple(args, "s#p", &text, &length, &caseless))
        return NULL;
    int error;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | PCRE2_DUPNAMES | (caseless ? PCRE2_CASELESS : 0);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)text, (PCRE2_SIZE)length, options, &error, &at, NULL);
    if (code == NULL) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        return PyErr_Format(PyExc_ValueError, "PCRE2 refuses the pattern at %zu: %s", (size_t)at, (const char *)message);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* without JIT it is interpreted: the same answers */
    PatternObject *out = PyObject_New(PatternObject, &PatternType);
    if (out == NULL) {
        pcre2_code_free(code);
        return NULL;
    }
    out->code = code;
    return (PyObject *)out;
}
#endif

/* ---- the rules of scan.py, on bytes ---- */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x0b || c == 0x0c; }

/* _STAMP_START: [0-9]{4}-[0-9]{2}-[0-9]{2}T */
static int stamp_at(const unsigned char *d, size_t len, size_t at) {
    static const char shape[] = "9999-99-99T";
    if (len - at < 11)
        return 0;
    for (size_t i = 0; i < 11; i++) {
        unsigned char c = d[at + i];
        if (shape[i] == '9' ? !is_digit(c) : c != (unsigned char)shape[i])
            return 0;
    }
    return 1;
}

/* _may_have_prefix */
static int may_have_prefix(const unsigned char *d, size_t len, size_t at) {
    if (at >= len)
        return 0;
    unsigned char c = d[at];
    if (c == '(' || c == '[' || c == '>')
        return 1;
    return is_digit(c) && stamp_at(d, len, at);
}

static int is_name_start(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_name_char(unsigned char c) {
    return is_name_start(c) || is_digit(c) || c == '.' || c == ':' || c == '<' || c == '>' || c == '-';
}
static int is_ip_char(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':'; }
static int is_age_char(unsigned char c) { return is_digit(c) || c == 'h' || c == 'm' || c == 's' || c == '.'; }

/* What follows the actor name in _RAY_PID_PREFIX, from `i`: its end, or 0. Each part is greedy and
 * what may follow it cannot continue it, so no backtracking is needed past the name. */
static size_t ray_tail(const unsigned char *p, size_t n, size_t i) {
    if (i < n && p[i] == ',')
        i++;
    if (i < n && p[i] == ' ')
        i++;
    if (n - i < 4 || memcmp(p + i, "pid=", 4) != 0)
        return 0;
    i += 4;
    size_t digits = i;
    while (i < n && is_digit(p[i]))
        i++;
    if (i == digits)
        return 0;
    if (n - i >= 5 && memcmp(p + i, ", ip=", 5) == 0) {
        size_t j = i + 5;
        while (j < n && is_ip_char(p[j]))
            j++;
        if (j > i + 5)
            i = j;
    }
    if (n - i >= 2 && p[i] == ' ' && p[i + 1] == '+') {
        size_t j = i + 2;
        while (j < n && is_age_char(p[j]))
            j++;
        if (j > i + 2)
            i = j;
    }
    if (i >= n || p[i] != ')')
        return 0;
    i++;
    if (i < n && is_space(p[i]))
        i++;
    return i;
}

/* _RAY_PID_PREFIX.match: the end of the match, or 0. The name is tried longest first, as the regex
 * backtracks (`(xpid=1)` is the name `x`). */
static size_t ray_prefix(const unsigned char *p, size_t n) {
    if (n == 0 || p[0] != '(')
        return 0;
    size_t longest = 0;
    if (n > 1 && is_name_start(p[1])) {
        size_t j = 2;
        while (j < n && is_name_char(p[j]))
            j++;
        longest = j - 1;
    }
    for (size_t name = longest;; name--) {
        size_t end = ray_tail(p, n, 1 + name);
        if (end)
            return end;
        if (name == 0)
            return 0;
    }
}

static int contains(const unsigned char *p, size_t n, const char *what) { return memmem(p, n, what, strlen(what)) != NULL; }

/* _is_redraw */
static int is_redraw(const unsigned char *p, size_t n) {
    return contains(p, n, "%|") && (contains(p, n, "it/s") || contains(p, n, "s/it") || contains(p, n, "?it"));
}

static int is_blank(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_space(p[i]))
            return 0;
    return 1;
}

/* ---- classify ---- */

typedef struct {
    u64vec *hits;
    const char *data;
    size_t size;
    unsigned int keep; /* only ids below this are kept */
} scan_context;

static int on_match(unsigned int id, unsigned long long from, unsigned long long to, unsigned int flags, void *context) {
    (void)from;
    (void)flags;
    scan_context *c = context;
    size_t end = (size_t)to;
    if (id >= c->keep)
        return 0;
    /* Every hit is wanted at its line's end: a literal marker is reported where it ends, and so is
     * a signature (its translation does not run on to the line's end, matcher.py). */
    const char *newline = end < c->size ? memchr(c->data + end, '\n', c->size - end) : NULL;
    end = newline ? (size_t)(newline - c->data) : c->size;
    return push(c->hits, ((uint64_t)end << ID_BITS) | id) ? 1 : 0;
}

enum { DONE, TO_PYTHON, DEFERRED };

#define DEFER (-2) /* a verdict: the hit needs a Python call, and classify was told not to make one */

typedef struct {
    size_t end;             /* in the chunk: where its newline is, or the chunk ends */
    size_t first_id, n_ids; /* its ids for Python: line_ids.v[first_id .. first_id + n_ids) */
    int decision;           /* TO_PYTHON or DEFERRED */
} line_info;

typedef struct {
    unsigned int id;
    const unsigned char *text;
    size_t length;
    int verdict;
} memo_entry;

#define MEMO 32

typedef struct {
    const unsigned char *flags;
    const unsigned char *roles;
    const unsigned int *within; /* by signature id: a widened one's hit on a text this long or shorter stands */
    size_t ids;
    unsigned int signatures;
    uint64_t *counts;
    size_t *last;
    hs_database_t **verifiers; /* by signature id: the exact translation of a widened one, or NULL */
    PyObject **confirmers;     /* by signature id: for an inexact one no database states, its pattern's test, or NULL */
#ifdef HAVE_PCRE2
    pcre2_code **patterns; /* by signature id: the same pattern compiled by PCRE2, or NULL (then confirmers) */
    pcre2_match_data *match;
#endif
    hs_scratch_t *scratch;
    PyThreadState **released; /* the thread state classify saved when it let go of the GIL */
    int defer;                 /* no Python call: a line that needs one is handed back as deferred */
    memo_entry memo[MEMO];     /* the current line's confirmations: each pass over its hits asks again */
    size_t memos;
} rules;

static int on_verified(unsigned int id, unsigned long long from, unsigned long long to, unsigned int flags, void *context) {
    (void)id;
    (void)from;
    (void)to;
    (void)flags;
    (void)context;
    return 1; /* one match is enough */
}

/* Whether an inexact translation's hit on this text is the signature's: 1, confirmed; 0, not;
 * -1, the line goes to Python; DEFER, it needs a Python call and r->defer forbids one. As _confirm
 * decides: the exact translation of a widened one (as LineMatcher.verify), else the signature's own
 * pattern, by PCRE2 where matcher.py handed it over, else by a Python call made with the GIL taken
 * back. */
static int confirm_hit(rules *r, unsigned int id, const unsigned char *text, size_t length) {
    for (size_t m = 0; m < r->memos; m++)
        if (r->memo[m].id == id && r->memo[m].text == text && r->memo[m].length == length)
            return r->memo[m].verdict;
    int verdict = -1;
#ifdef HAVE_PCRE2
    if (r->patterns[id] != NULL) {
        verdict = pattern_found(r->patterns[id], r->match, text, length);
    } else
#endif
    if (r->verifiers[id] != NULL) {
        hs_error_t status = hs_scan(r->verifiers[id], (const char *)text, (unsigned int)length, 0, r->scratch, on_verified, NULL);
        verdict = status == HS_SUCCESS ? 0 : status == HS_SCAN_TERMINATED ? 1 : -1;
    } else if (r->confirmers[id] != NULL) {
        if (r->defer)
            return DEFER; /* not memoised: the line is settled again, whole, by a call that may */
        PyEval_RestoreThread(*r->released);
        PyObject *answer = PyObject_CallFunction(r->confirmers[id], "y#", (const char *)text, (Py_ssize_t)length);
        if (answer == NULL)
            PyErr_Clear(); /* the Python path meets the same and deals with it */
        verdict = answer == Py_True ? 1 : answer == Py_False ? 0 : -1;
        Py_XDECREF(answer);
        *r->released = PyEval_SaveThread();
    }
    if (r->memos < MEMO) {
        memo_entry *entry = &r->memo[r->memos++];
        entry->id = id;
        entry->text = text;
        entry->length = length;
        entry->verdict = verdict;
    }
    return verdict;
}

/* What becomes of one hit of a line: 1, confirmed as it stands and counted; 0, skipped (its
 * signature does not apply to this kind of file, or its pattern does not confirm it); -1, the line
 * goes to Python; DEFER, as confirm_hit. */
static int settle_hit(rules *r, unsigned int id, const unsigned char *text, size_t length) {
    unsigned char f = r->flags[id];
    if (((f & F_ANCHORED) || !(f & F_EXACT)) && may_have_prefix(text, length, 0))
        return -1; /* _confirm checks it with the signature's pattern */
    if (!(f & F_EXACT) && (r->within[id] == 0 || length > r->within[id])) {
        int confirmed = confirm_hit(r, id, text, length);
        if (confirmed <= 0)
            return confirmed; /* not confirmed: the hit is dropped */
    }
    if ((f & F_SIMPLE) && (f & F_SATURATED))
        return 1;
    if (f & F_KINDSKIP)
        return 0;
    return -1; /* gated, distinct, or its tally still wants records */
}

static void count_hit(rules *r, unsigned int id, size_t end) {
    r->counts[id] += 1;
    if (end > r->last[id]) /* lines with pieces are counted after the others */
        r->last[id] = end;
}

#define MAX_PARTS 4096

/* ---- the text that is scanned: the chunk, its Ray prefixes and redraws cut apart ----
 * The full path matches a line's text after a launcher prefix and each redraw normalize.segments
 * keeps, not the line as written. The chunk is copied into a buffer where such a line is cut into
 * segments, one a line of the buffer, so the one scan gives each piece's hits: no piece is scanned a
 * second time. A line's markers are those of all its segments. Every part of a redrawn line is a
 * segment (no marker spans a carriage return). A Ray prefix is a segment of its own only where no
 * literal marker can run across its end (matcher.py, `cuttable`); elsewhere the whole line is
 * scanned for its markers, beside the text after the prefix. A line that cannot be cut as scan.py
 * cuts it (another prefix after Ray's, too many redraws) is copied whole: Python takes it. */

enum { SEG_MARKS, SEG_PIECE };

typedef struct {
    size_t start, end; /* in the buffer; end: where its newline is (or the buffer ends) */
    int kind;          /* SEG_MARKS: only its markers count; SEG_PIECE: its signatures' hits too */
} segment;

typedef struct {
    size_t start, end;               /* the line in the chunk (end: its newline, or the chunk's end) */
    size_t buffer_start, buffer_end; /* its segments in the buffer, from the first's start to the last's end */
    size_t first_segment, segments;
    int redrawn;
} cut_line;

typedef struct {
    unsigned char *data;
    size_t length, room;
    segment *segments;
    size_t n_segments, segments_room;
    cut_line *lines;
    size_t n_lines, lines_room;
    size_t *whole_prefixed; /* where the lines that may start with a prefix but are not cut end, in the buffer */
    size_t n_whole_prefixed, whole_prefixed_room;
    size_t newlines; /* in the chunk */
} cut_text;

static int append(cut_text *t, const unsigned char *text, size_t length) {
    if (reserve((void **)&t->data, &t->room, t->length + length + 1, 1))
        return -1;
    if (length)
        memcpy(t->data + t->length, text, length);
    t->length += length;
    return 0;
}

/* One segment and its newline. */
static int add_segment(cut_text *t, const unsigned char *text, size_t length, int kind) {
    if (reserve((void **)&t->segments, &t->segments_room, t->n_segments + 1, sizeof *t->segments) || append(t, text, length))
        return -1;
    segment *s = &t->segments[t->n_segments++];
    s->start = t->length - length;
    s->end = t->length;
    s->kind = kind;
    t->data[t->length++] = '\n';
    return 0;
}

/* A part with a launcher prefix: the prefix (or, unless cuttable, the whole part) for its markers and
 * the text after it as a piece; 0 when the prefix is not Ray's alone (strip_prefixes decides). */
static int add_after_prefix(cut_text *t, const unsigned char *part, size_t length, int cuttable) {
    size_t cut = ray_prefix(part, length);
    if (cut == 0 || may_have_prefix(part, length, cut))
        return 0;
    if (add_segment(t, part, cuttable ? cut : length, SEG_MARKS) || add_segment(t, part + cut, length - cut, SEG_PIECE))
        return -1;
    return 1;
}

/* The parts of a line with carriage returns, as _kept_redraws keeps them (pieces) or not (markers
 * only); 0 when none is kept, there are too many, or a kept one cannot be cut. A run of parts that
 * are not kept is one segment, carriage returns and all, as in the line: a bar redrawn a hundred
 * times is scanned as one text, not as a hundred lines for every anchored signature to try. */
static int add_redraws(cut_text *t, const unsigned char *raw, size_t length, int cuttable) {
    size_t nonblank = 0, from = 0;
    for (size_t i = 0; i <= length; i++) {
        if (i == length || raw[i] == '\r') {
            nonblank += !is_blank(raw + from, i - from);
            from = i + 1;
        }
    }
    if (nonblank == 0 || nonblank > MAX_PARTS)
        return 0;
    size_t ordinal = 0, dropped_from = 0, dropped_to = 0; /* the run of parts not kept, if any */
    int dropped = 0;
    from = 0;
    for (size_t i = 0; i <= length; i++) {
        if (i != length && raw[i] != '\r')
            continue;
        const unsigned char *part = raw + from;
        size_t part_length = i - from;
        int kept = 0;
        if (!is_blank(part, part_length)) {
            kept = nonblank <= 4 || ordinal == 0 || ordinal + 2 >= nonblank || !is_redraw(part, part_length);
            ordinal++;
        }
        if (!kept) {
            if (!dropped)
                dropped_from = from;
            dropped_to = i;
            dropped = 1;
        }
        from = i + 1;
        if (!kept && i != length)
            continue;
        if (dropped && dropped_to > dropped_from && add_segment(t, raw + dropped_from, dropped_to - dropped_from, SEG_MARKS))
            return -1;
        dropped = 0;
        if (!kept)
            continue; /* the line's last part, in the run just added */
        int made;
        if (may_have_prefix(part, part_length, 0))
            made = add_after_prefix(t, part, part_length, cuttable);
        else
            made = add_segment(t, part, part_length, SEG_PIECE) ? -1 : 1;
        if (made <= 0)
            return made;
    }
    return 1;
}

/* The chunk copied into t, its Ray-prefixed and redrawn lines cut into segments; -1 when out of memory. */
static int cut_chunk(cut_text *t, const unsigned char *data, size_t size, int cuttable) {
    size_t at = 0, copied = 0;
    const unsigned char *cr = size ? memchr(data, '\r', size) : NULL;
    while (at < size) {
        const unsigned char *newline = memchr(data + at, '\n', size - at);
        size_t end = newline ? (size_t)(newline - data) : size;
        t->newlines += newline != NULL;
        int redrawn = cr != NULL && (size_t)(cr - data) < end;
        if (redrawn || may_have_prefix(data, size, at)) {
            if (append(t, data + copied, at - copied))
                return -1;
            copied = at;
            size_t length = t->length, first = t->n_segments;
            int made = redrawn ? add_redraws(t, data + at, end - at, cuttable) : add_after_prefix(t, data + at, end - at, cuttable);
            if (made < 0)
                return -1;
            if (made == 0) {
                t->length = length; /* the line is copied whole, with the lines after it */
                t->n_segments = first;
                if (may_have_prefix(data, size, at)) {
                    if (reserve((void **)&t->whole_prefixed, &t->whole_prefixed_room, t->n_whole_prefixed + 1, sizeof *t->whole_prefixed))
                        return -1;
                    t->whole_prefixed[t->n_whole_prefixed++] = length + (end - at);
                }
            } else {
                if (newline == NULL)
                    t->length--; /* the chunk's last line has no newline */
                if (reserve((void **)&t->lines, &t->lines_room, t->n_lines + 1, sizeof *t->lines))
                    return -1;
                cut_line *line = &t->lines[t->n_lines++];
                line->start = at;
                line->end = end;
                line->first_segment = first;
                line->segments = t->n_segments - first;
                line->buffer_start = t->segments[first].start;
                line->buffer_end = t->segments[t->n_segments - 1].end;
                line->redrawn = redrawn;
                copied = newline ? end + 1 : size;
            }
        }
        if (redrawn)
            cr = end < size ? memchr(data + end, '\r', size - end) : NULL;
        if (newline == NULL)
            break;
        at = end + 1;
    }
    return append(t, data + copied, size - copied);
}

/* A line's hits, in order: every hit settles, or the whole line goes to Python; then the confirmed
 * ones are counted (no two share a text and an id: classify keeps one hit a line and id). With
 * `pieces`, the hits are (segment << ID_BITS | id) of a cut line's pieces, each on its segment's
 * text; without, all are on `text`. Markers' ids are skipped. */
static int settle_hits(rules *r, const uint64_t *hits, size_t n, const cut_text *pieces, const unsigned char *text, size_t length, size_t end) {
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < n; k++) {
            uint64_t hit = hits[k];
            unsigned int id = (unsigned int)(hit & ID_MASK);
            if (id >= r->signatures)
                continue;
            if (pieces != NULL) {
                const segment *piece = &pieces->segments[hit >> ID_BITS];
                text = pieces->data + piece->start;
                length = piece->end - piece->start;
            }
            int verdict = settle_hit(r, id, text, length);
            if (verdict < 0)
                return verdict == DEFER ? DEFERRED : TO_PYTHON;
            if (pass == 1 && verdict == 1)
                count_hit(r, id, end);
        }
    }
    return DONE;
}

/* A line left to Python (or deferred), with its ids. */
static int keep_line(line_info **lines, size_t *n_lines, size_t *room, size_t end, size_t first_id, size_t n_ids, int decision) {
    if (reserve((void **)lines, room, *n_lines + 1, sizeof **lines))
        return -1;
    line_info *line = &(*lines)[(*n_lines)++];
    line->end = end;
    line->first_id = first_id;
    line->n_ids = n_ids;
    line->decision = decision;
    return 0;
}

static PyObject *classify(PyObject *Py_UNUSED(module), PyObject *args) {
    DatabaseObject *database;
    ScratchObject *scratch;
    Py_buffer chunk, flag_buffer, role_buffer, within_buffer;
    unsigned int signatures, literal_markers;
    int config_full, defer = 0, cuttable = 0;
    PyObject *verifier_list;
    if (!PyArg_ParseTuple(args, "O!O!y*y*y*IIpOy*|pp", &DatabaseType, &database, &ScratchType, &scratch, &chunk, &flag_buffer, &role_buffer, &signatures,
                          &literal_markers, &config_full, &verifier_list, &within_buffer, &defer, &cuttable))
        return NULL;
    PyObject *result = NULL;
    const unsigned char *data = chunk.buf;
    size_t size = (size_t)chunk.len;
    size_t ids = (size_t)flag_buffer.len;
    u64vec hits = {.v = scratch->hits, .cap = scratch->hits_room}, line_ids = {0}, piece_hits = {0};
    line_info *lines = NULL;
    cut_text text = {.data = scratch->text, .room = scratch->text_room};
    rules r = {.flags = flag_buffer.buf, .roles = role_buffer.buf, .within = within_buffer.buf, .ids = ids, .signatures = signatures, .scratch = scratch->scratch, .defer = defer};
    size_t n_lines = 0, lines_room = 0;
    unsigned int redrawn_id = (unsigned int)ids; /* the carriage-return marker: Python cuts a redrawn line it is handed */
    int failed = 0; /* 1: out of memory; 2: the scan failed */

    if ((size_t)role_buffer.len != ids || signatures > ids || ids > ID_MASK + 1 || literal_markers > ids) {
        PyErr_SetString(PyExc_ValueError, "flags and roles must name every id of the database");
        goto release;
    }
    if ((size_t)within_buffer.len != signatures * sizeof(unsigned int)) {
        PyErr_SetString(PyExc_ValueError, "within must hold one unsigned int a signature");
        goto release;
    }
    for (size_t id = signatures; id < ids; id++)
        if (r.roles[id] & R_REDRAWN)
            redrawn_id = (unsigned int)id;
    if (redrawn_id == ids) {
        PyErr_SetString(PyExc_ValueError, "roles must name the carriage-return marker");
        goto release;
    }
    r.counts = calloc(signatures ? signatures : 1, sizeof *r.counts);
    r.last = calloc(signatures ? signatures : 1, sizeof *r.last);
    r.verifiers = calloc(signatures ? signatures : 1, sizeof *r.verifiers);
    r.confirmers = calloc(signatures ? signatures : 1, sizeof *r.confirmers);
#ifdef HAVE_PCRE2
    r.patterns = calloc(signatures ? signatures : 1, sizeof *r.patterns);
    r.match = pcre2_match_data_create(1, NULL);
    if (r.patterns == NULL || r.match == NULL) {
        PyErr_NoMemory();
        goto release;
    }
#endif
    if (r.counts == NULL || r.last == NULL || r.verifiers == NULL || r.confirmers == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    if (verifier_list != Py_None) {
        if (!PyList_Check(verifier_list) || PyList_GET_SIZE(verifier_list) > (Py_ssize_t)signatures) {
            PyErr_SetString(PyExc_TypeError, "verifiers must be a list of Database, Pattern, callable or None, by signature id");
            goto release;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(verifier_list); i++) {
            PyObject *item = PyList_GET_ITEM(verifier_list, i);
            if (item == Py_None)
                continue;
#ifdef HAVE_PCRE2
            if (PyObject_TypeCheck(item, &PatternType)) {
                r.patterns[i] = ((PatternObject *)item)->code; /* the list holds it for the call */
                continue;
            }
#endif
            if (!PyObject_TypeCheck(item, &DatabaseType) && PyCallable_Check(item)) {
                Py_INCREF(item); /* held while the GIL is let go */
                r.confirmers[i] = item;
                continue;
            }
            if (!PyObject_TypeCheck(item, &DatabaseType)) {
                PyErr_SetString(PyExc_TypeError, "verifiers must be a list of Database, Pattern, callable or None, by signature id");
                goto release;
            }
            r.verifiers[i] = ((DatabaseObject *)item)->db;
            /* The scratch grows to fit every database it scans with. */
            if (hs_alloc_scratch(r.verifiers[i], &scratch->scratch) != HS_SUCCESS) {
                PyErr_NoMemory();
                goto release;
            }
        }
        r.scratch = scratch->scratch;
    }

    Py_BEGIN_ALLOW_THREADS;
    r.released = &_save;
    /* Room for the chunk and a little more (each cut adds a newline or two), grown only if need be. */
    if (reserve((void **)&text.data, &text.room, size + size / 8 + 1, 1) || cut_chunk(&text, data, size, cuttable))
        failed = 1;
    if (!failed && text.length) {
        scan_context context = {&hits, (const char *)text.data, text.length, (unsigned int)ids};
        hs_error_t status = hs_scan(database->db, (const char *)text.data, (unsigned int)text.length, 0, scratch->scratch, on_match, &context);
        if (status != HS_SUCCESS)
            failed = status == HS_SCAN_TERMINATED ? 1 : 2;
    }
    if (!failed) {
        sort_u64(&hits);
        /* A signature may match a line more than once: one hit a line and id. */
        size_t unique = 0;
        for (size_t k = 0; k < hits.n; k++)
            if (unique == 0 || hits.v[k] != hits.v[unique - 1])
                hits.v[unique++] = hits.v[k];
        hits.n = unique;
        /* Group the hits by the buffer's line, and those by the chunk's line; settle what can be.
         * Only the lines left to Python (or deferred) are kept, in line order. */
        size_t next_cut = 0;    /* the first cut line that does not end before the hit */
        size_t next_prefixed = 0; /* the same, of the prefixed lines left whole */
        size_t i = 0;
        while (i < hits.n && !failed) {
            size_t at = (size_t)(hits.v[i] >> ID_BITS);
            while (next_cut < text.n_lines && text.lines[next_cut].buffer_end < at)
                next_cut++;
            r.memos = 0;
            if (next_cut < text.n_lines && text.lines[next_cut].buffer_start <= at) {
                /* A cut line: its markers from every segment, its signatures' hits from its pieces. */
                const cut_line *cut = &text.lines[next_cut];
                size_t segment = cut->first_segment, first_id = line_ids.n;
                int marks = 0;
                piece_hits.n = 0;
                for (; i < hits.n && (size_t)(hits.v[i] >> ID_BITS) <= cut->buffer_end; i++) {
                    size_t hit_end = (size_t)(hits.v[i] >> ID_BITS);
                    unsigned int id = (unsigned int)(hits.v[i] & ID_MASK);
                    while (text.segments[segment].end < hit_end)
                        segment++;
                    if (id >= signatures)
                        marks |= r.roles[id];
                    else if (text.segments[segment].kind != SEG_PIECE)
                        continue; /* a prefix's hit: the full path never matches the prefix itself */
                    else if (push(&piece_hits, ((uint64_t)segment << ID_BITS) | id)) {
                        failed = 1;
                        break;
                    }
                    if (push(&line_ids, id)) {
                        failed = 1;
                        break;
                    }
                }
                if (cut->redrawn && push(&line_ids, redrawn_id))
                    failed = 1;
                int decision = TO_PYTHON;
                if (!failed && !((marks & R_SLOW) || ((marks & R_CONFIG) && !config_full)))
                    decision = settle_hits(&r, piece_hits.v, piece_hits.n, &text, NULL, 0, cut->end);
                if (decision == DONE)
                    line_ids.n = first_id;
                else if (!failed && keep_line(&lines, &n_lines, &lines_room, cut->end, first_id, line_ids.n - first_id, decision))
                    failed = 1;
                continue;
            }
            /* A line as it stands, in the chunk: after a cut line, the buffer is as far from the
             * chunk as there. */
            size_t end = next_cut > 0 ? text.lines[next_cut - 1].end + (at - text.lines[next_cut - 1].buffer_end) : at;
            while (next_prefixed < text.n_whole_prefixed && text.whole_prefixed[next_prefixed] < at)
                next_prefixed++;
            int prefixed = next_prefixed < text.n_whole_prefixed && text.whole_prefixed[next_prefixed] == at;
            size_t first = i;
            int marks = 0, plain = 1, saturated = 1, found = 0;
            for (; i < hits.n && (size_t)(hits.v[i] >> ID_BITS) == at; i++) {
                unsigned int id = (unsigned int)(hits.v[i] & ID_MASK);
                unsigned char f = r.flags[id];
                if (id >= signatures) {
                    marks |= r.roles[id];
                    plain = 0;
                    continue;
                }
                found = 1;
                if (!((f & F_EXACT) && (f & F_SIMPLE)))
                    plain = 0;
                if (!(f & F_SATURATED))
                    saturated = 0;
            }
            /* What is not a count goes to Python: a tally that still wants records, failure words,
             * config keys, the prefixed or redrawn lines cut_chunk left whole (with hits). */
            int decision = TO_PYTHON;
            if (!prefixed && plain) {
                if (saturated) { /* the common line: counted as it stands */
                    for (size_t k = first; k < i; k++)
                        count_hit(&r, (unsigned int)(hits.v[k] & ID_MASK), end);
                    decision = DONE;
                }
            } else if (!(marks & (R_SLOW | R_REDRAWN)) && !((marks & R_CONFIG) && !config_full) && !(prefixed && found)) {
                /* Hits to confirm or check on the line as it stands, or none at all. */
                const unsigned char *stop = end > 0 ? memrchr(data, '\n', end) : NULL;
                const unsigned char *raw = stop ? stop + 1 : data;
                decision = settle_hits(&r, hits.v + first, i - first, NULL, raw, (size_t)(data + end - raw), end);
            }
            if (decision == DONE)
                continue;
            size_t first_id = line_ids.n;
            for (size_t k = first; k < i && !failed; k++)
                failed = push(&line_ids, hits.v[k] & ID_MASK) ? 1 : 0;
            if (!failed && keep_line(&lines, &n_lines, &lines_room, end, first_id, line_ids.n - first_id, decision))
                failed = 1;
        }
    }
    Py_END_ALLOW_THREADS;

    if (failed == 1) {
        PyErr_NoMemory();
        goto release;
    }
    if (failed == 2) {
        PyErr_SetString(HyperscanError, "the scan failed");
        goto release;
    }
    {
        PyObject *handed = PyList_New(0);
        PyObject *counted = PyList_New(0);
        PyObject *deferred = PyList_New(0);
        if (handed == NULL || counted == NULL || deferred == NULL) {
            Py_XDECREF(handed);
            Py_XDECREF(counted);
            Py_XDECREF(deferred);
            goto release;
        }
        for (size_t l = 0; l < n_lines; l++) {
            line_info *line = &lines[l];
            if (line->decision == DEFERRED) {
                PyObject *end = PyLong_FromSsize_t((Py_ssize_t)line->end);
                if (end == NULL || PyList_Append(deferred, end) < 0) {
                    Py_XDECREF(end);
                    Py_DECREF(handed);
                    Py_DECREF(counted);
                    Py_DECREF(deferred);
                    goto release;
                }
                Py_DECREF(end);
                continue;
            }
            if (line->decision != TO_PYTHON)
                continue;
            PyObject *id_list = PyList_New((Py_ssize_t)line->n_ids);
            PyObject *item = id_list ? Py_BuildValue("(nN)", (Py_ssize_t)line->end, id_list) : NULL;
            if (item == NULL || PyList_Append(handed, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(handed);
                Py_DECREF(counted);
                Py_DECREF(deferred);
                goto release;
            }
            for (size_t k = 0; k < line->n_ids; k++)
                PyList_SET_ITEM(id_list, (Py_ssize_t)k, PyLong_FromUnsignedLong((unsigned long)line_ids.v[line->first_id + k]));
            Py_DECREF(item);
        }
        for (unsigned int id = 0; id < signatures; id++) {
            if (!r.counts[id])
                continue;
            PyObject *item = Py_BuildValue("(IKn)", id, (unsigned long long)r.counts[id], (Py_ssize_t)r.last[id]);
            if (item == NULL || PyList_Append(counted, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(handed);
                Py_DECREF(counted);
                Py_DECREF(deferred);
                goto release;
            }
            Py_DECREF(item);
        }
        result = Py_BuildValue("(NNNn)", handed, counted, deferred, (Py_ssize_t)text.newlines);
    }
release:
    scratch->hits = hits.v; /* kept for the next call */
    scratch->hits_room = hits.cap;
    scratch->text = text.data;
    scratch->text_room = text.room;
    free(line_ids.v);
    free(piece_hits.v);
    free(lines);
    free(text.segments);
    free(text.lines);
    free(text.whole_prefixed);
    free(r.counts);
    free(r.last);
    free(r.verifiers);
    if (r.confirmers != NULL)
        for (unsigned int id = 0; id < signatures; id++)
            Py_XDECREF(r.confirmers[id]);
    free(r.confirmers);
#ifdef HAVE_PCRE2
    free(r.patterns);
    pcre2_match_data_free(r.match);
#endif
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&flag_buffer);
    PyBuffer_Release(&role_buffer);
    PyBuffer_Release(&within_buffer);
    return result;
}

static PyMethodDef module_methods[] = {
    {"compile", compile_database, METH_VARARGS, "compile(expressions, flags) -> Database: ids are the expressions' positions."},
    {"loads", load_database, METH_VARARGS, "loads(data) -> Database: a database from Database.dumps()."},
    {"version", library_version, METH_NOARGS, "The Hyperscan library's version."},
#ifdef HAVE_PCRE2
    {"pattern", compile_pattern, METH_VARARGS, "pattern(text, caseless) -> Pattern: compiled by PCRE2 (UTF-8); ValueError when PCRE2 refuses it."},
#endif
    {"classify", classify, METH_VARARGS,
     "classify(database, scratch, chunk, flags, roles, signatures, literal_markers, config_full, verifiers, within, defer=False, cuttable=False)"
     " -> (lines, counted, deferred, newlines)\n\n"
     "within: one unsigned int a signature, the length of text up to which a widened one's hit stands unconfirmed; "
     "cuttable: a Ray prefix may be scanned apart from the text after it (no literal marker runs across its end).\n"
     "lines: (end, ids) of the lines left to the Python path, in line order; counted: (id, hits, end of the last) for "
     "each signature whose hits were counted here; deferred: with defer, the ends of the lines a hit of which needs a "
     "Python call (no call is made then: the GIL is never taken), to be classified again without it; newlines: how many "
     "the chunk holds."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_linescan", "The aggregated scan's per-line work against the Hyperscan library.", -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__linescan(void) {
    if (PyType_Ready(&DatabaseType) < 0 || PyType_Ready(&ScratchType) < 0)
        return NULL;
#ifdef HAVE_PCRE2
    if (PyType_Ready(&PatternType) < 0)
        return NULL;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    HyperscanError = PyErr_NewException("rltriage.pipeline._linescan.HyperscanError", PyExc_RuntimeError, NULL);
    if (HyperscanError == NULL || PyModule_AddObject(m, "HyperscanError", HyperscanError) < 0) {
        Py_XDECREF(HyperscanError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&DatabaseType);
    Py_INCREF(&ScratchType);
    PyModule_AddObject(m, "Database", (PyObject *)&DatabaseType);
    PyModule_AddObject(m, "Scratch", (PyObject *)&ScratchType);
#ifdef HAVE_PCRE2
    Py_INCREF(&PatternType);
    PyModule_AddObject(m, "Pattern", (PyObject *)&PatternType);
#endif
    return m;
}
